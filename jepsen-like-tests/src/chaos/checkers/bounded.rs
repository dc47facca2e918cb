//! Checker 4: bounded staleness and exactly-once.
//!
//! - A read served `bounded` with `max_staleness_ms = m`, invoked at t, reflects every
//!   mutation of its key acknowledged before t - m: its version is at least theirs. (The
//!   node's token was asked for no earlier than m before it served, which is after t - m,
//!   on the same machine's monotonic clock, and a token's index covers everything
//!   committed before it was asked for.)
//! - Request ids apply once: every delivery of one `request_id` that succeeded reports
//!   the same results, and every delivery after the first is a replay
//!   (`replayed: true`); no identical resend is refused as `request_id_reused`.
//! - Single-writer keys of the retries workload (`retry/`): the n-th acknowledged write
//!   has version n, and the final history holds exactly one event per acknowledged write
//!   (a request applied twice shows up as a skipped version or an extra event).

use std::collections::BTreeMap;

use cairn_api::Consistency;

use super::index::Index;
use super::{Inputs, Verdict};
use crate::chaos::history::{Input, Outcome, Record, Workload};

pub fn check(inputs: &Inputs, idx: &Index) -> Verdict {
    let mut v = Verdict::new("bounded-staleness-exactly-once");
    bounded_reads(inputs.records, idx, &mut v);
    deliveries(inputs.records, &mut v);
    single_writer_keys(inputs, &mut v);
    v
}

fn bounded_reads(records: &[Record], idx: &Index, v: &mut Verdict) {
    let mut checked = 0;
    for r in records {
        let (
            Input::Read {
                key,
                max_staleness_ms: Some(m),
                ..
            },
            Some(found),
        ) = (&r.input, r.read())
        else {
            continue;
        };
        let served = found.as_ref().map(|f| f.served_consistency);
        if served.is_some_and(|c| c != Consistency::Bounded) {
            continue;
        }
        checked += 1;
        let horizon = r.invoke.saturating_sub(m * 1_000);
        let floor = idx.max_version_before(key, horizon);
        let got = found.as_ref().map_or(0, |f| f.version);
        if got < floor {
            v.violation(format!(
                "key {key:?}: bounded read (op {}, max_staleness {m} ms, served by node {}) \
                 returned version {got}, but version {floor} was acknowledged more than {m} ms \
                 before the read began",
                r.id,
                found.as_ref().map_or(0, |f| f.served_node)
            ));
        }
    }
    v.checked += checked;
    v.note(format!("{checked} bounded reads checked"));
}

fn deliveries(records: &[Record], v: &mut Verdict) {
    let mut by_id: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        if let Some(id) = r.input.request_id().filter(|id| !id.is_empty()) {
            by_id.entry(id).or_default().push(r);
        }
        if r.error_code() == Some("request_id_reused") {
            v.violation(format!(
                "op {}: an identical resend was refused as request_id_reused",
                r.id
            ));
        }
    }
    let (mut groups, mut resent) = (0, 0);
    for (id, deliveries) in by_id {
        groups += 1;
        resent += deliveries
            .iter()
            .map(|r| r.attempts as usize - 1)
            .sum::<usize>();
        if deliveries.len() < 2 {
            continue;
        }
        let ok: Vec<&&Record> = deliveries
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .collect();
        let Some(first) = ok.first() else { continue };
        let norm = |r: &Record| -> Vec<(String, u64, u64)> {
            r.mut_results()
                .iter()
                .map(|m| (m.key.clone(), m.version, m.revision))
                .collect()
        };
        for later in &ok[1..] {
            if norm(later) != norm(first) {
                v.violation(format!(
                    "request_id {id}: op {} answered {:?}, a later delivery (op {}) {:?}: applied twice",
                    first.id,
                    norm(first),
                    later.id,
                    norm(later)
                ));
            } else if later.mut_results().iter().any(|m| !m.replayed) {
                v.violation(format!(
                    "request_id {id}: delivery op {} of an applied request was not a replay",
                    later.id
                ));
            }
        }
    }
    v.checked += groups;
    v.note(format!(
        "{groups} request ids, {resent} resends within operations"
    ));
}

fn single_writer_keys(inputs: &Inputs, v: &mut Verdict) {
    let mut per_key: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in inputs
        .records
        .iter()
        .filter(|r| r.workload == Workload::Retries)
    {
        if let Some(key) = r.input.key() {
            per_key.entry(key).or_default().push(r);
        }
    }
    let mut keys = 0;
    for (key, records) in per_key {
        // One logical write per request id, in invocation order.
        let mut writes: Vec<&Record> = Vec::new();
        for r in &records {
            if !writes
                .iter()
                .any(|w| w.input.request_id() == r.input.request_id())
            {
                writes.push(r);
            }
        }
        if writes.iter().any(|r| r.outcome != Outcome::Ok) {
            // Unresolved or refused writes make the count uncertain.
            continue;
        }
        keys += 1;
        for (n, w) in writes.iter().enumerate() {
            let version = w.mut_results().first().map_or(0, |m| m.version);
            if version != n as u64 + 1 {
                v.violation(format!(
                    "single-writer key {key:?}: acknowledged write #{} (op {}, {} sends) has \
                     version {version}: a request applied more than once",
                    n + 1,
                    w.id,
                    w.attempts
                ));
                break;
            }
        }
        if let Some(Ok(events)) = inputs.final_state.histories.get(key) {
            if events.len() != writes.len() {
                v.violation(format!(
                    "single-writer key {key:?}: {} acknowledged writes but {} history events",
                    writes.len(),
                    events.len()
                ));
            }
        }
    }
    v.checked += keys;
    v.note(format!("{keys} single-writer keys fully accounted"));
}
