//! The checkers on small synthetic histories: a clean one passes everything, and each
//! kind of violation fails the checker meant to catch it.

use std::collections::BTreeMap;

use cairn_api::{Consistency, EventKind, HistoryEvent, State};

use super::{run_all, Inputs, Verdict};
use crate::chaos::final_state::FinalState;
use crate::chaos::history::{Input, MutOut, Outcome, Output, Probe, ReadOut, Record, Workload};
use crate::chaos::sha256::value_hash_of_int;

const KEY: &str = "k";

fn record(id: u64, t: (u64, u64), input: Input, output: Output) -> Record {
    Record {
        id,
        process: id,
        workload: Workload::Register,
        invoke: t.0,
        complete: Some(t.1),
        outcome: Outcome::Ok,
        input,
        output: Some(output),
        attempts: 1,
    }
}

fn write(value: i64, rid: &str) -> Input {
    Input::Write {
        key: KEY.into(),
        value,
        expected_version: None,
        based_on_revision: None,
        clear_tombstone: false,
        override_revocation: false,
        request_id: rid.into(),
    }
}

fn forget(rid: &str) -> Input {
    Input::Forget {
        key: KEY.into(),
        expected_version: None,
        request_id: rid.into(),
    }
}

fn read(consistency: Consistency, staleness: Option<u64>) -> Input {
    Input::Read {
        key: KEY.into(),
        consistency,
        max_staleness_ms: staleness,
        session: false,
        node: None,
        known: None,
        handoff_forget_version: None,
    }
}

fn applied(state: State, version: u64, forget_epoch: u64, tombstone: bool) -> Output {
    Output::Mutation {
        results: vec![MutOut {
            key: KEY.into(),
            state,
            version,
            generation: 1,
            forget_epoch,
            revision: version + 10,
            replayed: false,
            already: false,
            tombstone_id: tombstone.then(|| format!("t{version}")),
        }],
    }
}

fn seen(value: Option<i64>, version: u64, consistency: Consistency) -> Output {
    Output::Read {
        rec: Some(ReadOut {
            state: if value.is_some() {
                State::Active
            } else {
                State::Forgotten
            },
            value,
            version,
            generation: 1,
            forget_epoch: if value.is_some() { 0 } else { version },
            revision: version + 10,
            tombstone_id: None,
            served_node: 1,
            served_consistency: consistency,
            applied_index: 100,
        }),
    }
}

fn event(kind: EventKind, version: u64, value: Option<i64>) -> HistoryEvent {
    HistoryEvent {
        kind,
        version,
        revision: version + 10,
        actor: "chaos".into(),
        reason: None,
        at: 0,
        value_hash: value.map(value_hash_of_int),
        by: None,
        anchor: None,
        observed_hash: None,
    }
}

/// write 1 (v1), forget (v2), then a linearizable read of the tombstone (v2).
fn clean() -> (Vec<Record>, FinalState) {
    let records = vec![
        record(
            1,
            (10, 20),
            write(1, "a"),
            applied(State::Active, 1, 0, false),
        ),
        record(
            2,
            (30, 40),
            forget("b"),
            applied(State::Forgotten, 2, 2, true),
        ),
        record(
            3,
            (50, 60),
            read(Consistency::Linearizable, None),
            seen(None, 2, Consistency::Linearizable),
        ),
    ];
    let mut fs = FinalState {
        converged: Some(Ok(12)),
        members: vec![1],
        ..FinalState::default()
    };
    fs.list_digests.insert(1, Ok(7));
    fs.histories.insert(
        KEY.into(),
        Ok(vec![
            event(EventKind::Written, 1, Some(1)),
            event(EventKind::Forgotten, 2, None),
        ]),
    );
    fs.node_histories
        .insert(KEY.into(), BTreeMap::from([(1, Ok(9))]));
    fs.tombstones
        .insert("t2".into(), BTreeMap::from([(1, Ok((KEY.to_string(), 2)))]));
    (records, fs)
}

fn verdicts(records: &[Record], fs: &FinalState) -> Vec<Verdict> {
    let probes = [Probe {
        after: "test".into(),
        started: 0,
        took: Some(1_000),
        error: None,
    }];
    run_all(&Inputs {
        records,
        final_state: fs,
        nemesis: &[],
        probes: &probes,
        wipes: &[],
        nemesis_errors: &[],
        unexpected_exits: &[],
        liveness_bound_us: 10_000_000,
        search_budget: crate::check::Budget::default(),
    })
}

fn failed(v: &[Verdict]) -> Vec<&'static str> {
    v.iter().filter(|v| !v.passed).map(|v| v.name).collect()
}

#[test]
fn a_clean_history_passes_every_checker() {
    let (records, fs) = clean();
    let v = verdicts(&records, &fs);
    assert!(failed(&v).is_empty(), "{v:#?}");
}

#[test]
fn a_plain_write_through_a_tombstone_is_caught() {
    let (mut records, mut fs) = clean();
    records.push(record(
        4,
        (70, 80),
        write(3, "c"),
        applied(State::Active, 3, 2, false),
    ));
    if let Some(Ok(events)) = fs.histories.get_mut(KEY) {
        events.push(event(EventKind::Written, 3, Some(3)));
    }
    let f = failed(&verdicts(&records, &fs));
    assert!(
        f.contains(&"forget-invariants") && f.contains(&"linearizability"),
        "{f:?}"
    );
}

#[test]
fn a_read_below_an_acknowledged_forget_is_caught() {
    let (mut records, fs) = clean();
    records.push(record(
        4,
        (70, 80),
        read(Consistency::Linearizable, None),
        seen(Some(1), 1, Consistency::Linearizable),
    ));
    let f = failed(&verdicts(&records, &fs));
    assert!(
        f.contains(&"forget-invariants") && f.contains(&"linearizability"),
        "{f:?}"
    );
}

#[test]
fn a_read_served_weaker_than_it_asked_is_caught() {
    // A node that answers a linearizable read from its local state and labels it `any`
    // escapes every check judged by the level served; this one compares it with the
    // level asked. The stale value (v1 after the forget) would otherwise pass.
    let (mut records, fs) = clean();
    records.push(record(
        4,
        (70, 80),
        read(Consistency::Linearizable, None),
        seen(Some(1), 1, Consistency::Any),
    ));
    assert_eq!(failed(&verdicts(&records, &fs)), vec!["linearizability"]);
    // An upgrade is no violation: a session read re-read at the leader.
    let (mut records, fs) = clean();
    records.push(record(
        4,
        (70, 80),
        read(Consistency::Any, None),
        seen(None, 2, Consistency::Linearizable),
    ));
    assert!(failed(&verdicts(&records, &fs)).is_empty());
}

#[test]
fn an_absent_key_is_judged_by_the_consistency_asked_for() {
    // Chaos seed 9385774814723887609: a bounded read (1 s bound) of a key written and
    // forgotten 0.3 s earlier found it absent on a lagging node; that is within the
    // bound, not a linearizable read below the forget.
    let (mut records, fs) = clean();
    let absent = Output::Read { rec: None };
    records.push(record(
        4,
        (70, 80),
        read(Consistency::Bounded, Some(1_000)),
        absent.clone(),
    ));
    assert!(failed(&verdicts(&records, &fs)).is_empty());
    // The same answer to a linearizable read is a violation.
    records.push(record(
        5,
        (90, 100),
        read(Consistency::Linearizable, None),
        absent,
    ));
    assert!(failed(&verdicts(&records, &fs)).contains(&"forget-invariants"));
}

#[test]
fn a_read_in_flight_across_a_wipe_of_its_node_is_not_judged() {
    // Chaos seed 17357642913699093197: node 1 was wiped and restored from an older
    // snapshot while a read to it was in flight; the read, retried on the restarted node,
    // returned a lower version than an earlier read on the old data dir.
    let (mut records, fs) = clean();
    let any = |t, version: u64| {
        record(
            t,
            (t * 10, t * 10 + 20),
            read(Consistency::Any, None),
            seen(None, version, Consistency::Any),
        )
    };
    records.push(any(10, 3)); // 100-120: v3 on the old data dir
    records.push(any(13, 2)); // 130-150: v2, across the wipe at 140
    let run = |wipes: &[(u64, u64)]| {
        let probes = [Probe {
            after: "test".into(),
            started: 0,
            took: Some(1_000),
            error: None,
        }];
        failed(&run_all(&Inputs {
            records: &records,
            final_state: &fs,
            nemesis: &[],
            probes: &probes,
            wipes,
            nemesis_errors: &[],
            unexpected_exits: &[],
            liveness_bound_us: 10_000_000,
            search_budget: crate::check::Budget::default(),
        }))
    };
    assert!(run(&[(1, 140)]).is_empty(), "in flight across the wipe");
    // Without the wipe, the same answers are a node going back in version.
    assert_eq!(run(&[]), vec!["forget-invariants"]);
}

#[test]
fn a_stale_bounded_read_is_caught_only_past_the_bound() {
    let (mut records, fs) = clean();
    // Invoked 1 ms after the forget was acknowledged: within a 500 ms bound, fine.
    records.push(record(
        4,
        (1_040, 1_100),
        read(Consistency::Bounded, Some(500)),
        seen(Some(1), 1, Consistency::Bounded),
    ));
    assert!(failed(&verdicts(&records, &fs)).is_empty());
    // Invoked a second after it: must reflect it.
    records.push(record(
        5,
        (1_000_040, 1_000_100),
        read(Consistency::Bounded, Some(500)),
        seen(Some(1), 1, Consistency::Bounded),
    ));
    assert_eq!(
        failed(&verdicts(&records, &fs)),
        vec!["bounded-staleness-exactly-once"]
    );
}

#[test]
fn a_second_application_of_a_request_id_is_caught() {
    let (mut records, fs) = clean();
    // Request "a" delivered again, applied again instead of replayed.
    records.push(record(
        4,
        (70, 80),
        write(1, "a"),
        applied(State::Active, 3, 2, false),
    ));
    let f = failed(&verdicts(&records, &fs));
    assert!(f.contains(&"bounded-staleness-exactly-once"), "{f:?}");
}

#[test]
fn a_lost_acknowledged_write_is_caught() {
    let (records, mut fs) = clean();
    // The cluster's history lost write 1 and gave version 1 to another value.
    fs.histories.insert(
        KEY.into(),
        Ok(vec![
            event(EventKind::Written, 1, Some(99)),
            event(EventKind::Forgotten, 2, None),
        ]),
    );
    assert_eq!(
        failed(&verdicts(&records, &fs)),
        vec!["durability-convergence"]
    );
}

#[test]
fn diverged_nodes_and_missing_tombstones_are_caught() {
    let (records, mut fs) = clean();
    fs.list_digests.insert(2, Ok(8));
    fs.tombstones.insert(
        "t2".into(),
        BTreeMap::from([(1, Ok((KEY.to_string(), 2))), (2, Err("404".into()))]),
    );
    let f = failed(&verdicts(&records, &fs));
    assert_eq!(f, vec!["forget-invariants", "durability-convergence"]);
}

#[test]
fn a_failed_probe_fails_liveness() {
    let (records, fs) = clean();
    let probes = [Probe {
        after: "crash".into(),
        started: 0,
        took: None,
        error: Some("no_leader".into()),
    }];
    let v = run_all(&Inputs {
        records: &records,
        final_state: &fs,
        nemesis: &[],
        probes: &probes,
        wipes: &[],
        nemesis_errors: &[],
        unexpected_exits: &[],
        liveness_bound_us: 10_000_000,
        search_budget: crate::check::Budget::default(),
    });
    assert_eq!(failed(&v), vec!["liveness"]);
}
