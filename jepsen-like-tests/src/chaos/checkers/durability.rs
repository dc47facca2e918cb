//! Checker 3: durability and convergence, judged after the last heal.
//!
//! - The members converged (same applied index, equal to the leader's commit index).
//! - Every member's full listing has the same digest, and every touched key's history
//!   is the same on every member.
//! - Every acknowledged mutation is in its key's final history: an event at its version,
//!   of its kind, and for writes with the written value's hash (a version alone is not
//!   enough: a cluster that lost a write hands its version to the next one). The key's
//!   final version is at least every acknowledged version.

use std::collections::BTreeMap;

use cairn_api::{EventKind, HistoryEvent};

use super::index::Index;
use super::{Inputs, Verdict};
use crate::chaos::history::Input;
use crate::chaos::sha256::value_hash_of_int;

/// The node's cap on one history answer (`node/src/api/reads.rs`).
const HISTORY_EVENTS_MAX: usize = 10_000;

pub fn check(inputs: &Inputs, idx: &Index) -> Verdict {
    let mut v = Verdict::new("durability-convergence");
    let fs = inputs.final_state;
    match &fs.converged {
        Some(Ok(index)) => v.note(format!(
            "members {:?} converged at applied index {index}",
            fs.members
        )),
        Some(Err(e)) => v.violation(format!("no convergence: {e}")),
        None => v.violation("convergence was never checked".into()),
    }
    converged_listings(inputs, &mut v);
    acknowledged_present(inputs, idx, &mut v);
    v
}

fn converged_listings(inputs: &Inputs, v: &mut Verdict) {
    let fs = inputs.final_state;
    let mut digests: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (node, d) in &fs.list_digests {
        match d {
            Ok(d) => digests.entry(*d).or_default().push(*node),
            Err(e) => v.violation(format!("node {node}: listing failed: {e}")),
        }
    }
    if digests.len() > 1 {
        let mut detail = String::new();
        // Name a few keys that differ, for diagnosis.
        let mut keys: Vec<&String> = fs.listings.values().flat_map(|l| l.keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut shown = 0;
        for key in keys {
            let per_node: Vec<(u64, Option<&(String, u64)>)> =
                fs.listings.iter().map(|(n, l)| (*n, l.get(key))).collect();
            if per_node.windows(2).any(|w| w[0].1 != w[1].1) && shown < 5 {
                detail.push_str(&format!("\n    {key:?}: {per_node:?}"));
                shown += 1;
            }
        }
        v.violation(format!(
            "nodes disagree on the final state: {digests:?}{detail}"
        ));
    }
    let mut keys = 0;
    for (key, per_node) in &fs.node_histories {
        keys += 1;
        let distinct: BTreeMap<Result<u64, String>, Vec<u64>> =
            per_node.iter().fold(BTreeMap::new(), |mut m, (n, d)| {
                m.entry(d.clone()).or_default().push(*n);
                m
            });
        if distinct.len() > 1 {
            v.violation(format!("key {key:?}: node histories differ: {distinct:?}"));
        }
    }
    v.checked += keys + fs.list_digests.len();
}

fn expected_kinds(input: &Input) -> &'static [EventKind] {
    match input {
        Input::Write { .. } => &[EventKind::Written, EventKind::TombstoneCleared],
        Input::Forget { .. } => &[EventKind::Forgotten],
        Input::Revoke { .. } => &[EventKind::Revoked],
        Input::Reinstate { .. } => &[EventKind::Reinstated],
        _ => &[],
    }
}

fn acknowledged_present(inputs: &Inputs, idx: &Index, v: &mut Verdict) {
    let mut checked = 0;
    for (key, acked) in &idx.acked {
        let events: &[HistoryEvent] = match inputs.final_state.histories.get(key) {
            Some(Ok(events)) => events,
            Some(Err(e)) => {
                v.violation(format!("key {key:?}: final history unreadable: {e}"));
                continue;
            }
            None => {
                v.violation(format!("key {key:?}: final history never fetched"));
                continue;
            }
        };
        let last = events.iter().map(|e| e.version).max().unwrap_or(0);
        let first = events.iter().map(|e| e.version).min().unwrap_or(0);
        // The node returns the newest HISTORY_EVENTS_MAX events, oldest first.
        let truncated = events.len() >= HISTORY_EVENTS_MAX;
        if truncated {
            v.note(format!(
                "key {key:?}: history truncated at {} events",
                events.len()
            ));
        }
        for a in acked.iter().filter(|a| !a.result.already) {
            if truncated && a.result.version < first {
                continue;
            }
            checked += 1;
            if a.result.version > last {
                v.violation(format!(
                    "key {key:?}: acknowledged {} is above the final version {last}: lost",
                    a.describe()
                ));
                continue;
            }
            let Some(event) = events.iter().find(|e| e.version == a.result.version) else {
                v.violation(format!(
                    "key {key:?}: acknowledged {} has no event in the final history",
                    a.describe()
                ));
                continue;
            };
            if !expected_kinds(&a.input).contains(&event.kind) {
                v.violation(format!(
                    "key {key:?}: acknowledged {} but the final history has {:?} at that version",
                    a.describe(),
                    event.kind
                ));
                continue;
            }
            if let Input::Write { value, .. } = a.input {
                let expected = value_hash_of_int(value);
                if event.value_hash.as_deref() != Some(expected.as_str()) {
                    v.violation(format!(
                        "key {key:?}: acknowledged {} (value {value}) but the event at that \
                         version records another value: the acknowledged write was lost",
                        a.describe()
                    ));
                }
            }
        }
    }
    v.checked += checked;
    v.note(format!(
        "{checked} acknowledged mutations found in the final histories"
    ));
}
