//! The run's single clock: microseconds since the run started, from one `Instant`.
//!
//! Every history event, nemesis interval and liveness probe is stamped with it, so the
//! checkers compare times from one monotonic source (the nodes share the same
//! CLOCK_MONOTONIC, which is what makes the bounded-staleness check meaningful).

use std::time::{Duration, Instant};

/// Microseconds since the start of the run.
pub type Micros = u64;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Milliseconds as [`Micros`].
pub fn ms(ms: u64) -> Micros {
    ms * 1_000
}
