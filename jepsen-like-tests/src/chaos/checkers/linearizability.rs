//! Checker 1: per-key linearizability.
//!
//! - Version order (fast, precise messages): per key, no two acknowledged mutations share
//!   a version; an acknowledged mutation's version is above every version acknowledged
//!   before it was invoked; a linearizable read's version is at least every version
//!   acknowledged before it was invoked.
//! - The search: every mutation (acknowledged, definitely rejected, or indeterminate)
//!   and every read served linearizably, against [`CairnKey`]. `unknown` (budget ran out)
//!   fails the run: nothing was proven.
//! - Served as asked: no read is served weaker than it asked (`served.consistency`).
//!   The checks above and the other checkers judge a read by the level the node says it
//!   served, so a node that quietly answered a linearizable read locally and labelled it
//!   `any` would otherwise be judged by nothing stronger than `any`'s rules.

use std::collections::BTreeMap;

use cairn_api::Consistency;

use super::index::Index;
use super::model::{CairnKey, KeyState, MInput, MOp, MOutput};
use super::{Inputs, Verdict};
use crate::chaos::history::{Input, Outcome, Output, ReadOut, Record};
use crate::check::history::{History, Operation};
use crate::check::linearizable;
use crate::check::Verdict as SearchVerdict;

/// Rejection codes the model explains; others (400, 422, ...) applied nothing and say
/// nothing about the key's state.
const MODEL_CODES: [&str; 5] = [
    "version_conflict",
    "key_forgotten",
    "key_revoked",
    "stale_write",
    "not_found",
];

pub fn check(inputs: &Inputs, idx: &Index) -> Verdict {
    let mut v = Verdict::new("linearizability");
    served_as_asked(inputs.records, &mut v);
    version_order(inputs.records, idx, &mut v);
    let history = to_history(inputs.records, idx);
    v.checked = history.len();
    v.note(format!(
        "{} operations on {} keys searched",
        history.len(),
        count_keys(&history)
    ));
    match linearizable::check(&CairnKey, &history, inputs.search_budget) {
        SearchVerdict::Linearizable => {}
        SearchVerdict::NotLinearizable(c) => v.violation(format!(
            "not linearizable: key {}: {}",
            c.partition, c.description
        )),
        unknown @ SearchVerdict::Unknown(_) => {
            v.violation(format!("{unknown} (unknown counts as a failure)"))
        }
    }
    v
}

/// Every read that returned a record was served at least as strongly as it asked: a
/// client may upgrade a read (a session read re-read at the leader), never downgrade it.
fn served_as_asked(records: &[Record], v: &mut Verdict) {
    let mut checked = 0;
    for r in records {
        let (
            Input::Read {
                key, consistency, ..
            },
            Some(Some(found)),
        ) = (&r.input, r.read())
        else {
            continue;
        };
        checked += 1;
        if strength(found.served_consistency) < strength(*consistency) {
            v.violation(format!(
                "key {key:?}: read op {} asked {} and was served {} by node {}",
                r.id,
                consistency.as_str(),
                found.served_consistency.as_str(),
                found.served_node
            ));
        }
    }
    v.note(format!("{checked} reads served at least as asked"));
}

/// The order of the consistency levels' guarantees (SPEC §3).
fn strength(level: Consistency) -> u8 {
    match level {
        Consistency::Any => 0,
        Consistency::Bounded => 1,
        Consistency::Linearizable => 2,
    }
}

fn count_keys(history: &History<MInput, MOutput>) -> usize {
    let mut keys: Vec<&str> = history.ops.iter().map(|o| o.input.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

fn version_order(records: &[Record], idx: &Index, v: &mut Verdict) {
    for (key, acked) in &idx.acked {
        let mut by_version: BTreeMap<u64, &super::index::Acked> = BTreeMap::new();
        for a in acked {
            if a.result.already {
                continue;
            }
            if let Some(other) = by_version.insert(a.result.version, a) {
                v.violation(format!(
                    "key {key:?}: two acknowledged mutations got version {}: {} and {}",
                    a.result.version,
                    other.describe(),
                    a.describe()
                ));
            }
            let before = idx.max_version_before(key, a.invoke);
            if a.result.version <= before {
                v.violation(format!(
                    "key {key:?}: {} got version {} although version {before} was \
                     acknowledged before it was invoked",
                    a.describe(),
                    a.result.version
                ));
            }
        }
    }
    for r in records {
        let (Input::Read { key, .. }, Some(found)) = (&r.input, r.read()) else {
            continue;
        };
        let Some(rec) = found else { continue };
        if rec.served_consistency != Consistency::Linearizable {
            continue;
        }
        let before = idx.max_version_before(key, r.invoke);
        if rec.version < before {
            v.violation(format!(
                "key {key:?}: linearizable read (op {}, served by node {}) returned version {} \
                 although version {before} was acknowledged before it began",
                r.id, rec.served_node, rec.version
            ));
        }
    }
}

fn model_op(input: &Input) -> Option<MInput> {
    let (key, op) = match input {
        Input::Write {
            key,
            value,
            expected_version,
            based_on_revision,
            clear_tombstone,
            override_revocation,
            ..
        } => (
            key,
            MOp::Write {
                value: *value,
                expected: *expected_version,
                based: based_on_revision.is_some(),
                clear: *clear_tombstone,
                override_revocation: *override_revocation,
            },
        ),
        Input::Forget {
            key,
            expected_version,
            ..
        } => (
            key,
            MOp::Forget {
                expected: *expected_version,
            },
        ),
        Input::Revoke { key, .. } => (key, MOp::Revoke),
        Input::Reinstate { key, .. } => (key, MOp::Reinstate),
        Input::Read { key, .. } => (key, MOp::Read),
        Input::Batch { .. } => return None,
    };
    Some(MInput {
        key: key.clone(),
        op,
    })
}

/// What a successful read saw, if it was linearizable (as served; an absent key comes back
/// without `served`, so then as asked); `None` for reads the model does not judge.
fn linearizable_read(asked: Consistency, rec: &Option<ReadOut>) -> Option<Option<KeyState>> {
    let linearizable = match rec {
        Some(found) => found.served_consistency == Consistency::Linearizable,
        None => asked == Consistency::Linearizable,
    };
    linearizable.then(|| {
        rec.as_ref().map(|found| KeyState {
            state: found.state,
            value: found.value,
            version: found.version,
            generation: found.generation,
            forget_epoch: found.forget_epoch,
            fenced: false,
        })
    })
}

/// The model's view of the history.
pub fn to_history(records: &[Record], idx: &Index) -> History<MInput, MOutput> {
    let mut ops = Vec::new();
    let mut push = |r: &Record, input: MInput, output: Option<MOutput>| {
        ops.push(Operation {
            process: r.process,
            invoke: r.invoke,
            complete: r.complete,
            input,
            output,
        })
    };
    for r in records {
        if idx.duplicates.contains(&r.id) {
            continue;
        }
        match (&r.input, r.outcome, &r.output) {
            (Input::Read { consistency, .. }, Outcome::Ok, Some(Output::Read { rec })) => {
                if let Some(seen) = linearizable_read(*consistency, rec) {
                    push(
                        r,
                        model_op(&r.input).expect("a read"),
                        Some(MOutput::Read(seen)),
                    );
                }
            }
            (Input::Read { .. }, _, _) => {}
            (input, Outcome::Ok, _) => {
                for (part, res) in input.parts().into_iter().zip(r.mut_results()) {
                    let out = MOutput::Mutation {
                        state: res.state,
                        version: res.version,
                        generation: res.generation,
                        forget_epoch: res.forget_epoch,
                        already: res.already,
                    };
                    push(r, model_op(part).expect("a single-key part"), Some(out));
                }
            }
            (input, Outcome::Fail, Some(Output::Error { code, op_index, .. })) => {
                if !MODEL_CODES.contains(&code.as_str()) {
                    continue;
                }
                let parts = input.parts();
                // A rejected batch names its failing part; the others never applied.
                let failing = match (input, op_index) {
                    (Input::Batch { .. }, Some(i)) => parts.get(*i).copied(),
                    (Input::Batch { .. }, None) => None,
                    (single, _) => Some(single),
                };
                if let Some(part) = failing {
                    let op = model_op(part).expect("a single-key part");
                    push(r, op, Some(MOutput::Rejected(code.clone())));
                }
            }
            (input, Outcome::Info, _) => {
                for part in input.parts() {
                    push(r, model_op(part).expect("a single-key part"), None);
                }
            }
            _ => {}
        }
    }
    History::new(ops)
}
