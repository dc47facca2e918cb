//! The recorded history: every client operation as invoke / ok / fail / info events in
//! `history.jsonl`, and the same operations in memory as [`Record`]s for the checkers.
//!
//! - One clock ([`Clock`], µs since the run started) stamps everything.
//! - `info` means indeterminate: any error after a mutation may have reached a node. It
//!   is never folded into `fail`, which is reserved for definite answers (a 409 names
//!   its code) and for reads (which have no effect to be unsure about).
//! - A mutation resent with the same `request_id` is the *same* operation: its record
//!   keeps the first invocation time and takes the final answer (the node deduplicates by
//!   `request_id`, so the operation took effect at most once, somewhere in that window).
//!   The JSONL shows every attempt: invoke, info, invoke (retry), ok.
//! - Nemesis intervals and liveness probes are recorded here too, on the same clock.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use anyhow::{Context, Result};
use cairn_api::{Consistency, State};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::clock::{Clock, Micros};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Which workload issued an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    Register,
    ForgetRace,
    Handoff,
    Retries,
    /// Post-heal liveness probes.
    Probe,
    /// Targeted scenarios (planted-bug self-test).
    Scenario,
}

/// A session's mark for one key before a read: what the read must not go below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub generation: u64,
    pub forget_epoch: u64,
    pub version: u64,
}

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Input {
    Write {
        key: String,
        value: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_version: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        based_on_revision: Option<u64>,
        #[serde(default)]
        clear_tombstone: bool,
        #[serde(default)]
        override_revocation: bool,
        #[serde(default)]
        request_id: String,
    },
    Forget {
        key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expected_version: Option<u64>,
        #[serde(default)]
        request_id: String,
    },
    Revoke {
        key: String,
        #[serde(default)]
        request_id: String,
    },
    Reinstate {
        key: String,
        #[serde(default)]
        request_id: String,
    },
    /// All sub-operations in one entry, or none. Sub-operations touch distinct keys.
    Batch { ops: Vec<Input>, request_id: String },
    Read {
        key: String,
        consistency: Consistency,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_staleness_ms: Option<u64>,
        /// Sent through a client with a session (min_revision + session checks).
        session: bool,
        /// Pinned to this node; `None`: routed by the client.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<u64>,
        /// The session's mark for the key before the read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        known: Option<Mark>,
        /// Session-handoff read: the version of the forget the importing session knows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handoff_forget_version: Option<u64>,
    },
}

impl Input {
    pub fn key(&self) -> Option<&str> {
        match self {
            Input::Write { key, .. }
            | Input::Forget { key, .. }
            | Input::Revoke { key, .. }
            | Input::Reinstate { key, .. }
            | Input::Read { key, .. } => Some(key),
            Input::Batch { .. } => None,
        }
    }

    pub fn is_mutation(&self) -> bool {
        !matches!(self, Input::Read { .. })
    }

    pub fn request_id(&self) -> Option<&str> {
        match self {
            Input::Write { request_id, .. }
            | Input::Forget { request_id, .. }
            | Input::Revoke { request_id, .. }
            | Input::Reinstate { request_id, .. }
            | Input::Batch { request_id, .. } => Some(request_id),
            Input::Read { .. } => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Input::Write { .. } => "write",
            Input::Forget { .. } => "forget",
            Input::Revoke { .. } => "revoke",
            Input::Reinstate { .. } => "reinstate",
            Input::Batch { .. } => "batch",
            Input::Read { .. } => "read",
        }
    }

    /// The single-key operations this one consists of (a batch's, or itself).
    pub fn parts(&self) -> Vec<&Input> {
        match self {
            Input::Batch { ops, .. } => ops.iter().collect(),
            other => vec![other],
        }
    }
}

/// One applied mutation's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutOut {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub replayed: bool,
    pub already: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_id: Option<String>,
}

/// What a read returned (`None` in [`Output::Read`]: 404, the key is absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOut {
    pub state: State,
    /// Values are integers in this suite; `None` for forgotten keys.
    pub value: Option<i64>,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone_id: Option<String>,
    pub served_node: u64,
    pub served_consistency: Consistency,
    pub applied_index: u64,
}

impl ReadOut {
    pub fn mark(&self) -> Mark {
        Mark {
            generation: self.generation,
            forget_epoch: self.forget_epoch,
            version: self.version,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Output {
    /// One result per single-key part, in order.
    Mutation {
        results: Vec<MutOut>,
    },
    Read {
        rec: Option<ReadOut>,
    },
    Error {
        code: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        op_index: Option<usize>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Fail,
    Info,
}

/// One logical operation.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub id: u64,
    pub process: u64,
    pub workload: Workload,
    pub invoke: Micros,
    /// `None` for `info`: it may take effect at any time after `invoke`, or never.
    pub complete: Option<Micros>,
    pub outcome: Outcome,
    pub input: Input,
    pub output: Option<Output>,
    /// Sends under this operation's `request_id` (1 unless it was retried).
    pub attempts: u32,
}

impl Record {
    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The mutation results, if this is an acknowledged mutation.
    pub fn mut_results(&self) -> &[MutOut] {
        match (&self.outcome, &self.output) {
            (Outcome::Ok, Some(Output::Mutation { results })) => results,
            _ => &[],
        }
    }

    pub fn read(&self) -> Option<&Option<ReadOut>> {
        match (&self.outcome, &self.output) {
            (Outcome::Ok, Some(Output::Read { rec })) => Some(rec),
            _ => None,
        }
    }

    pub fn error_code(&self) -> Option<&str> {
        match &self.output {
            Some(Output::Error { code, .. }) => Some(code),
            _ => None,
        }
    }
}

/// A fault interval, for the report and the plots.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NemesisInterval {
    pub kind: String,
    pub detail: String,
    pub start: Micros,
    pub end: Option<Micros>,
}

/// A post-heal liveness probe.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    pub after: String,
    pub started: Micros,
    /// Time to the first success; `None`: no success within the bound.
    pub took: Option<Micros>,
    pub error: Option<String>,
}

/// An operation in flight.
#[derive(Debug)]
pub struct Pending {
    pub id: u64,
    pub process: u64,
    pub workload: Workload,
    pub invoke: Micros,
    pub input: Input,
    pub attempts: u32,
}

/// Collects the history; shared by every workload task.
pub struct Recorder {
    pub clock: Clock,
    file: Mutex<BufWriter<File>>,
    records: Mutex<BTreeMap<u64, Record>>,
    next_id: AtomicU64,
    next_value: AtomicU64,
    nemesis: Mutex<Vec<NemesisInterval>>,
    probes: Mutex<Vec<Probe>>,
}

impl Recorder {
    pub fn create(path: &Path, clock: Clock) -> Result<Recorder> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Recorder {
            clock,
            file: Mutex::new(BufWriter::new(file)),
            records: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            next_value: AtomicU64::new(1),
            nemesis: Mutex::new(Vec::new()),
            probes: Mutex::new(Vec::new()),
        })
    }

    /// A value no other write of the run uses.
    pub fn unique_value(&self) -> i64 {
        self.next_value.fetch_add(1, Ordering::Relaxed) as i64
    }

    fn event(&self, value: serde_json::Value) {
        let mut file = lock(&self.file);
        let _ = serde_json::to_writer(&mut *file, &value);
        let _ = file.write_all(b"\n");
    }

    pub fn invoke(&self, process: u64, workload: Workload, input: Input) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let invoke = self.clock.now();
        self.event(
            json!({"t": invoke, "process": process, "type": "invoke", "op": id,
                          "workload": workload, "input": input}),
        );
        Pending {
            id,
            process,
            workload,
            invoke,
            input,
            attempts: 1,
        }
    }

    /// The first send of `pending` ended without a definite answer; it is about to be
    /// resent under the same `request_id`.
    pub fn retrying(&self, pending: &mut Pending, error: &Output) {
        let now = self.clock.now();
        self.event(json!({"t": now, "process": pending.process, "type": "info",
                          "op": pending.id, "output": error, "retrying": true}));
        pending.attempts += 1;
        self.event(json!({"t": self.clock.now(), "process": pending.process,
                          "type": "invoke", "op": pending.id, "retry": pending.attempts,
                          "input": pending.input}));
    }

    pub fn complete(&self, pending: Pending, outcome: Outcome, output: Output) -> Record {
        let now = self.clock.now();
        let kind = match outcome {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        };
        self.event(json!({"t": now, "process": pending.process, "type": kind,
                          "op": pending.id, "output": output}));
        let record = Record {
            id: pending.id,
            process: pending.process,
            workload: pending.workload,
            invoke: pending.invoke,
            complete: (outcome != Outcome::Info).then_some(now),
            outcome,
            input: pending.input,
            output: Some(output),
            attempts: pending.attempts,
        };
        lock(&self.records).insert(record.id, record.clone());
        record
    }

    /// Resends an `info` mutation later (same `request_id`): reopens its record.
    pub fn reopen(&self, record: &Record, process: u64) -> Pending {
        self.event(
            json!({"t": self.clock.now(), "process": process, "type": "invoke",
                          "op": record.id, "retry": record.attempts + 1, "resolving": true,
                          "input": record.input}),
        );
        Pending {
            id: record.id,
            process,
            workload: record.workload,
            invoke: record.invoke,
            input: record.input.clone(),
            attempts: record.attempts + 1,
        }
    }

    pub fn nemesis_start(&self, kind: &str, detail: &str) -> usize {
        self.nemesis_started_at(self.clock.now(), kind, detail)
    }

    /// A fault interval that began at `start` (injecting can take a while: compaction,
    /// restarts, joins; the interval covers it).
    pub fn nemesis_started_at(&self, now: Micros, kind: &str, detail: &str) -> usize {
        self.event(
            json!({"t": now, "process": "nemesis", "type": "info", "f": "start",
                          "kind": kind, "detail": detail}),
        );
        let mut n = lock(&self.nemesis);
        n.push(NemesisInterval {
            kind: kind.to_string(),
            detail: detail.to_string(),
            start: now,
            end: None,
        });
        n.len() - 1
    }

    pub fn nemesis_stop(&self, index: usize, detail: &str) {
        let now = self.clock.now();
        let mut n = lock(&self.nemesis);
        if let Some(interval) = n.get_mut(index) {
            interval.end = Some(now);
            self.event(
                json!({"t": now, "process": "nemesis", "type": "info", "f": "stop",
                              "kind": interval.kind, "detail": detail}),
            );
        }
    }

    /// A free-form nemesis note (e.g. which node a step touched).
    pub fn note(&self, text: &str) {
        self.event(
            json!({"t": self.clock.now(), "process": "nemesis", "type": "note",
                          "text": text}),
        );
    }

    pub fn probe(&self, probe: Probe) {
        self.event(
            json!({"t": probe.started, "process": "probe", "type": "info",
                          "probe": probe}),
        );
        lock(&self.probes).push(probe);
    }

    pub fn records(&self) -> Vec<Record> {
        lock(&self.records).values().cloned().collect()
    }

    pub fn nemesis(&self) -> Vec<NemesisInterval> {
        lock(&self.nemesis).clone()
    }

    pub fn probes(&self) -> Vec<Probe> {
        lock(&self.probes).clone()
    }

    pub fn flush(&self) {
        let _ = lock(&self.file).flush();
    }
}
