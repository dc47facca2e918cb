//! The nemesis schedule: seeded, alternating a bounded fault interval and a bounded heal
//! interval. The first pass injects every enabled kind once (shuffled), then kinds are
//! drawn at random. Liveness is probed only after a heal, never during a fault.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::Rng;

use super::{Active, Kind, Nemesis};
use crate::chaos::workload::{probe, HARNESS_PROCESS};

/// How long fault and heal intervals last (ms, inclusive ranges).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Timing {
    pub fault_ms: (u64, u64),
    pub heal_ms: (u64, u64),
    /// After a heal, operations must succeed within this.
    pub liveness_bound: Duration,
}

/// Runs faults until `until`; the first pass over `kinds` completes even if it runs
/// past `until`, but never past `hard_until`.
pub async fn run(
    n: &mut Nemesis,
    kinds: &[Kind],
    timing: Timing,
    until: Instant,
    hard_until: Instant,
) {
    let mut first_pass: Vec<Kind> = kinds.to_vec();
    first_pass.shuffle(&mut n.rng);
    first_pass.reverse();
    let mut probes = 0u64;
    loop {
        let now = Instant::now();
        let pass_done = first_pass.is_empty();
        if now >= hard_until || (pass_done && now >= until) || kinds.is_empty() {
            break;
        }
        let kind = first_pass
            .pop()
            .unwrap_or_else(|| kinds[n.rng.gen_range(0..kinds.len())]);
        let fault_for =
            Duration::from_millis(n.rng.gen_range(timing.fault_ms.0..=timing.fault_ms.1));
        let heal_for = Duration::from_millis(n.rng.gen_range(timing.heal_ms.0..=timing.heal_ms.1));
        let injecting = n.rec.clock.now();
        let Some((active, detail)) = inject(n, kind).await else {
            tokio::time::sleep(heal_for).await;
            continue;
        };
        let interval = n.rec.nemesis_started_at(injecting, kind.name(), &detail);
        eprintln!(
            "chaos: +{:.1}s {}: {detail}",
            n.rec.clock.elapsed().as_secs_f64(),
            kind.name()
        );
        tokio::time::sleep(fault_for).await;
        let healed = heal(n, kind, active).await;
        n.rec.nemesis_stop(interval, &healed);
        let heal_started = Instant::now();
        probes += 1;
        probe_after_heal(n, kind, HARNESS_PROCESS + probes, timing.liveness_bound).await;
        let rest = heal_for.saturating_sub(heal_started.elapsed());
        tokio::time::sleep(rest).await;
    }
}

/// Injects `kind`; returns what to heal and the fault's description, or `None` when it
/// could not be injected (noted as skipped, and whatever half-happened healed).
async fn inject(n: &mut Nemesis, kind: Kind) -> Option<(Active, String)> {
    let (active, detail) = match n.inject(kind).await {
        Ok(done) => done,
        Err(e) => {
            let msg = format!("{}: could not inject: {e:#}", kind.name());
            n.rec.note(&msg);
            eprintln!("chaos: {msg}");
            n.skipped.push(msg);
            // Whatever half-happened is undone before going on.
            if let Err(e) = n.heal_all().await {
                n.errors
                    .push(format!("heal after failed {}: {e:#}", kind.name()));
            }
            return None;
        }
    };
    let detail = if kind.is_network() {
        format!("{detail} ({} iptables rules)", n.net.installed().len())
    } else {
        detail
    };
    Some((active, detail))
}

/// Heals `active`; returns what was healed, or the failure (then everything is healed).
async fn heal(n: &mut Nemesis, kind: Kind, active: Active) -> String {
    match n.heal(active).await {
        Ok(what) => what,
        Err(e) => {
            let msg = format!("{}: heal failed: {e:#}", kind.name());
            n.errors.push(msg.clone());
            if let Err(e) = n.heal_all().await {
                n.errors
                    .push(format!("full heal after {}: {e:#}", kind.name()));
            }
            msg
        }
    }
}

/// The liveness probe after healing `kind` (recorded; a failure is also printed).
async fn probe_after_heal(n: &Nemesis, kind: Kind, process: u64, bound: Duration) {
    let p = probe::run(&n.rec, &n.cluster, process, kind.name(), bound).await;
    if p.took.is_none() {
        eprintln!(
            "chaos: liveness probe after {} failed: {:?}",
            kind.name(),
            p.error
        );
    }
}
