//! A bound on how often one repeating event is logged. A removed node left running asks
//! for votes about twice a second, forever; a line for each would bury every other line of
//! its former peers' logs. The first occurrence of an event is logged at once, then at
//! most one line per [`LogThrottle::period`] carries how many occurrences it stands for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Events remembered at once; past it the memory starts over (every event is then logged
/// once more), so a stream of ever-new events cannot grow it.
const EVENTS_MAX: usize = 1024;

#[derive(Clone)]
pub struct LogThrottle {
    period: Duration,
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

struct Seen {
    logged_at: Instant,
    /// Occurrences since the last line.
    unlogged: u64,
}

impl LogThrottle {
    pub fn new(period: Duration) -> Self {
        LogThrottle {
            period,
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Whether to log this occurrence of `event` now: `Some(n)` with the `n` earlier
    /// occurrences left unlogged since its last line (0 for the first), `None` to stay
    /// quiet.
    pub fn admit(&self, event: &str, now: Instant) -> Option<u64> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = seen.get_mut(event) {
            if now.duration_since(entry.logged_at) < self.period {
                entry.unlogged += 1;
                return None;
            }
            let unlogged = std::mem::take(&mut entry.unlogged);
            entry.logged_at = now;
            return Some(unlogged);
        }
        if seen.len() >= EVENTS_MAX {
            seen.clear();
        }
        let first = Seen {
            logged_at: now,
            unlogged: 0,
        };
        seen.insert(event.to_string(), first);
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_logged_first_then_once_a_period_with_what_it_stands_for() {
        let throttle = LogThrottle::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert_eq!(throttle.admit("node 4 is not a member", at(0)), Some(0));
        assert_eq!(throttle.admit("node 4 is not a member", at(1)), None);
        assert_eq!(throttle.admit("node 4 is not a member", at(59)), None);
        assert_eq!(
            throttle.admit("wrong peer secret", at(2)),
            Some(0),
            "another event"
        );
        assert_eq!(throttle.admit("node 4 is not a member", at(60)), Some(2));
        assert_eq!(throttle.admit("node 4 is not a member", at(61)), None);
    }

    #[test]
    fn its_memory_is_bounded() {
        let throttle = LogThrottle::new(Duration::from_secs(60));
        let now = Instant::now();
        for i in 0..EVENTS_MAX * 2 {
            assert_eq!(throttle.admit(&format!("event {i}"), now), Some(0));
        }
        assert!(throttle.seen.lock().unwrap().len() <= EVENTS_MAX);
    }
}
