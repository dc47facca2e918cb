//! Checker 2: forget invariants (SPEC §1, §2, §3, §7).
//!
//! - No linearizable read returns the key below (or absent after) a forget acknowledged
//!   before the read began.
//! - Session reads never go below the session's mark for the key (its own forgets and
//!   writes, or an imported token's); a handed-off session never sees the forgotten value.
//! - No plain write (without `clear_tombstone`) succeeded on a forgotten key: neither an
//!   acknowledged write whose previous version is an acknowledged forget, nor a `written`
//!   event right after a `forgotten` one in a key's final history.
//! - A conditioned write (`based_on_revision = R`) never lands after a forget whose
//!   revision is above R.
//! - One tombstone per forget: every forget of a key at a version reports the same id,
//!   and every id is readable from every node after healing.
//! - Reads served by a node itself (bounded / any) never go back in version or forget
//!   epoch on that node, except across a wipe of its data dir.

use std::collections::{BTreeMap, BTreeSet};

use cairn_api::{Consistency, EventKind, State};

use super::index::Index;
use super::{Inputs, Verdict};
use crate::chaos::clock::Micros;
use crate::chaos::history::{Input, Mark, ReadOut, Record};

pub fn check(inputs: &Inputs, idx: &Index) -> Verdict {
    let mut v = Verdict::new("forget-invariants");
    reads_after_forgets(inputs.records, idx, &mut v);
    writes_through_tombstones(inputs, idx, &mut v);
    conditioned_writes(idx, &mut v);
    tombstones(inputs, idx, &mut v);
    per_node_monotonic(inputs.records, inputs.wipes, &mut v);
    v
}

fn value_visible(rec: &Option<ReadOut>) -> (u64, bool) {
    match rec {
        Some(r) => (r.version, matches!(r.state, State::Active | State::Revoked)),
        None => (0, false),
    }
}

fn reads_after_forgets(records: &[Record], idx: &Index, v: &mut Verdict) {
    let (mut linearizable, mut session, mut handoff) = (0, 0, 0);
    for r in records {
        let (
            Input::Read {
                key,
                consistency: asked,
                session: with_session,
                known,
                handoff_forget_version,
                ..
            },
            Some(found),
        ) = (&r.input, r.read())
        else {
            continue;
        };
        // An absent key comes back without `served`, so what was asked decides: a bounded
        // read may legitimately not see a key created and forgotten within its staleness
        // bound (the bounded checker judges it); only a linearizable one must.
        let linearizably = match found {
            Some(f) => f.served_consistency == Consistency::Linearizable,
            None => *asked == Consistency::Linearizable && !with_session,
        };
        if linearizably {
            linearizable += 1;
            not_below_acknowledged_forget(r, key, found, idx, v);
        }
        if let (true, Some(mark)) = (with_session, known) {
            session += 1;
            not_below_session_mark(r, key, found, mark, v);
        }
        if let Some(forget_version) = handoff_forget_version {
            handoff += 1;
            not_below_handed_off_forget(r, key, found, *forget_version, v);
        }
    }
    v.checked += linearizable + session + handoff;
    v.note(format!(
        "{linearizable} linearizable, {session} session and {handoff} handoff reads checked"
    ));
}

/// A linearizable read never returns the key below a forget acknowledged before it began.
fn not_below_acknowledged_forget(
    r: &Record,
    key: &str,
    found: &Option<ReadOut>,
    idx: &Index,
    v: &mut Verdict,
) {
    let (version, _) = value_visible(found);
    let forgot = idx.max_forget_before(key, r.invoke);
    if forgot > 0 && version < forgot {
        v.violation(format!(
            "key {key:?}: linearizable read (op {}) returned version {version} ({}) \
             after a forget at version {forgot} was acknowledged",
            r.id,
            found
                .as_ref()
                .map_or("absent".into(), |f| format!("{:?}", f.state)),
        ));
    }
}

/// A session read never goes below the session's mark for the key.
fn not_below_session_mark(
    r: &Record,
    key: &str,
    found: &Option<ReadOut>,
    mark: &Mark,
    v: &mut Verdict,
) {
    let got = found.as_ref().map(ReadOut::mark);
    let behind = match got {
        None => true,
        Some(g) => {
            g.version < mark.version
                || g.forget_epoch < mark.forget_epoch
                || g.generation < mark.generation
        }
    };
    if behind {
        v.violation(format!(
            "key {key:?}: session read (op {}) returned {got:?}, below the session's \
             mark {mark:?}",
            r.id
        ));
    }
}

/// A handed-off session never sees the value below the forget it imported.
fn not_below_handed_off_forget(
    r: &Record,
    key: &str,
    found: &Option<ReadOut>,
    forget_version: u64,
    v: &mut Verdict,
) {
    let (version, has_value) = value_visible(found);
    if has_value && version < forget_version || found.is_none() {
        v.violation(format!(
            "key {key:?}: after a session handoff (op {}) the importing client read \
             version {version} (value visible: {has_value}), below the forget at \
             version {forget_version}",
            r.id
        ));
    }
}

fn writes_through_tombstones(inputs: &Inputs, idx: &Index, v: &mut Verdict) {
    for (key, acked) in &idx.acked {
        let forgets: BTreeSet<u64> = acked
            .iter()
            .filter(|a| a.is_new_forget())
            .map(|a| a.result.version)
            .collect();
        for a in acked {
            let Input::Write {
                clear_tombstone: false,
                ..
            } = a.input
            else {
                continue;
            };
            if forgets.contains(&(a.result.version - 1)) {
                v.violation(format!(
                    "key {key:?}: plain write {} landed right after the acknowledged forget at \
                     version {} (no clear_tombstone)",
                    a.describe(),
                    a.result.version - 1
                ));
            }
        }
    }
    let mut keys = 0;
    for (key, events) in &inputs.final_state.histories {
        let Ok(events) = events else { continue };
        keys += 1;
        for pair in events.windows(2) {
            if pair[0].kind == EventKind::Forgotten && pair[1].kind == EventKind::Written {
                v.violation(format!(
                    "key {key:?}: history has `written` at version {} right after `forgotten` at \
                     version {}: a write went through the tombstone",
                    pair[1].version, pair[0].version
                ));
            }
        }
    }
    v.checked += keys;
}

fn conditioned_writes(idx: &Index, v: &mut Verdict) {
    for (key, acked) in &idx.acked {
        for a in acked {
            let Input::Write {
                based_on_revision: Some(based),
                ..
            } = a.input
            else {
                continue;
            };
            let fence = acked.iter().find(|f| {
                f.is_new_forget()
                    && f.result.revision > based
                    && f.result.version < a.result.version
            });
            if let Some(f) = fence {
                v.violation(format!(
                    "key {key:?}: write {} based on revision {based} succeeded after {} at \
                     revision {}",
                    a.describe(),
                    f.describe(),
                    f.result.revision
                ));
            }
        }
    }
}

fn tombstones(inputs: &Inputs, idx: &Index, v: &mut Verdict) {
    let mut by_version: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for (key, acked) in &idx.acked {
        for a in acked
            .iter()
            .filter(|a| matches!(a.input, Input::Forget { .. }))
        {
            match &a.result.tombstone_id {
                Some(id) => {
                    by_version
                        .entry((key.clone(), a.result.version))
                        .or_default()
                        .insert(id.clone());
                }
                None => v.violation(format!("{} returned no tombstone", a.describe())),
            }
        }
    }
    for ((key, version), ids) in &by_version {
        if ids.len() > 1 {
            v.violation(format!(
                "key {key:?}: forgets at version {version} returned different tombstones {ids:?}"
            ));
        }
    }
    let mut readable = 0;
    for ((key, version), ids) in &by_version {
        for id in ids {
            let Some(per_node) = inputs.final_state.tombstones.get(id) else {
                v.violation(format!("tombstone {id} (key {key:?}) was never looked up"));
                continue;
            };
            for (node, found) in per_node {
                match found {
                    Ok((k, ver)) if k == key && ver == version => readable += 1,
                    Ok((k, ver)) => v.violation(format!(
                        "node {node}: tombstone {id} is for {k:?} v{ver}, expected {key:?} v{version}"
                    )),
                    Err(e) => v.violation(format!(
                        "node {node}: tombstone {id} of key {key:?} v{version} not readable: {e}"
                    )),
                }
            }
        }
    }
    v.checked += readable;
    v.note(format!(
        "{} acknowledged forgets, {readable} tombstone reads after healing",
        by_version.len()
    ));
}

/// Completion times of one epoch's reads, and the running (version, forget epoch)
/// maximum up to each.
type Maxima = (Vec<Micros>, Vec<(u64, u64)>);

/// Per epoch: its reads (completion, version, forget epoch) sorted by completion, with the
/// running maximum up to each.
fn running_maxima(by_epoch: BTreeMap<usize, Vec<(Micros, u64, u64)>>) -> BTreeMap<usize, Maxima> {
    let mut maxima: BTreeMap<usize, Maxima> = BTreeMap::new();
    for (e, mut done) in by_epoch {
        done.sort_unstable();
        let mut best = (0, 0);
        let mut prefix = Vec::with_capacity(done.len());
        for (_, ver, fe) in &done {
            best = (best.0.max(*ver), best.1.max(*fe));
            prefix.push(best);
        }
        maxima.insert(e, (done.iter().map(|d| d.0).collect(), prefix));
    }
    maxima
}

fn per_node_monotonic(records: &[Record], wipes: &[(u64, Micros)], v: &mut Verdict) {
    // Reads a node served itself, by (node, key).
    let mut served: BTreeMap<(u64, &str), Vec<(&Record, &ReadOut)>> = BTreeMap::new();
    for r in records {
        let (Input::Read { key, .. }, Some(Some(found))) = (&r.input, r.read()) else {
            continue;
        };
        if found.served_consistency != Consistency::Linearizable {
            served
                .entry((found.served_node, key.as_str()))
                .or_default()
                .push((r, found));
        }
    }
    let mut checked = 0;
    for ((node, key), reads) in served {
        let node_wipes: Vec<Micros> = wipes
            .iter()
            .filter(|(n, _)| *n == node)
            .map(|w| w.1)
            .collect();
        // The data-dir incarnation ("epoch") of the node a read saw. A read in flight
        // across a wipe (invoked before, answered after: its client retried on the
        // restarted node) may have been served by either incarnation, so it is neither
        // checked nor used as evidence (chaos seed 17357642913699093197).
        let epoch = |t: Micros| node_wipes.iter().filter(|w| **w < t).count();
        let incarnation = |r: &Record| {
            let e = epoch(r.invoke);
            (epoch(r.complete?) == e).then_some(e)
        };
        let mut by_epoch: BTreeMap<usize, Vec<(Micros, u64, u64)>> = BTreeMap::new();
        for (a, got) in &reads {
            if let (Some(c), Some(e)) = (a.complete, incarnation(a)) {
                by_epoch
                    .entry(e)
                    .or_default()
                    .push((c, got.version, got.forget_epoch));
            }
        }
        let maxima = running_maxima(by_epoch);
        for (b, got) in &reads {
            checked += 1;
            let Some((times, prefix)) = incarnation(b).and_then(|e| maxima.get(&e)) else {
                continue;
            };
            let n = times.partition_point(|c| *c < b.invoke);
            if n == 0 {
                continue;
            }
            let (version, fe) = prefix[n - 1];
            if got.version < version || got.forget_epoch < fe {
                v.violation(format!(
                    "node {node}, key {key:?}: read op {} returned v{} (forget epoch {}) after an \
                     earlier read on that node returned v{version} (epoch {fe})",
                    b.id, got.version, got.forget_epoch
                ));
            }
        }
    }
    v.checked += checked;
}
