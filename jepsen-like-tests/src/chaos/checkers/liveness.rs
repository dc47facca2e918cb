//! Checker 5: liveness after heals. Faults may stop progress; healing must restore it.
//!
//! - Every post-heal probe (a write and a linearizable read of it through a fresh
//!   client) succeeded within the bound, and so did the final one.
//! - Every heal worked (restarts, re-joins, removals) and no node exited on its own.

use super::{Inputs, Verdict};

pub fn check(inputs: &Inputs) -> Verdict {
    let mut v = Verdict::new("liveness");
    let mut probes: Vec<_> = inputs.probes.to_vec();
    if let Some(p) = &inputs.final_state.final_probe {
        if !probes
            .iter()
            .any(|q| q.started == p.started && q.after == p.after)
        {
            probes.push(p.clone());
        }
    }
    let bound = inputs.liveness_bound_us;
    let mut slowest = 0;
    for p in &probes {
        match p.took {
            Some(took) if took <= bound => slowest = slowest.max(took),
            Some(took) => v.violation(format!(
                "after {} (healed at {} µs): first success after {} ms, bound {} ms",
                p.after,
                p.started,
                took / 1_000,
                bound / 1_000
            )),
            None => v.violation(format!(
                "after {} (healed at {} µs): no success within {} ms (last error: {})",
                p.after,
                p.started,
                bound / 1_000,
                p.error.as_deref().unwrap_or("-")
            )),
        }
    }
    if probes.is_empty() {
        v.violation("no liveness probe ran".into());
    }
    for e in inputs.nemesis_errors {
        v.violation(format!("nemesis: {e}"));
    }
    for e in inputs.unexpected_exits {
        v.violation(e.clone());
    }
    v.checked = probes.len();
    v.note(format!(
        "{} probes, slowest success {} ms",
        probes.len(),
        slowest / 1_000
    ));
    v
}
