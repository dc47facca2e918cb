//! Write load for crash and membership tests, and the check that nothing acknowledged was
//! lost.
//!
//! Each writer task owns its keys (`PREFIX/wT/kN`) and writes them in turn with a rising
//! sequence number, so per key the writes are sequential and a later acknowledged write
//! always has a higher version. A write is *acknowledged* only on a 200; an
//! `OutcomeUnknown` or transport failure is indeterminate (it may or may not be applied)
//! and a refusal such as `no_leader` after all retries is a definite "not applied".

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_api::{ReadOptions, State, WriteRequest};
use cairn_client::{Client, ClientError};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::wait_until;

/// Keys per writer: small enough that every key is overwritten several times.
const KEYS_PER_WRITER: u64 = 32;
/// A writer stops by itself after this long, even if nobody calls [`Load::stop`].
const LOAD_DURATION_MAX: Duration = Duration::from_secs(180);
/// How long [`Load::stop`] waits for writers to finish their current call (a call is
/// bounded by the client's retries and request timeout).
const STOP_TIMEOUT: Duration = Duration::from_secs(90);

/// The newest acknowledged write of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub seq: u64,
    pub version: u64,
    pub revision: u64,
}

/// What the writers saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Per key, its newest acknowledged write.
    pub acked: BTreeMap<String, Acked>,
    /// Acknowledged writes in total.
    pub acked_writes: usize,
    /// Writes with an unknown outcome (may or may not be applied).
    pub indeterminate: usize,
    /// Writes definitely refused (e.g. `no_leader` after every retry).
    pub refused: usize,
    /// Errors no plain write should ever get (409s, 500s, decode errors, ...).
    pub unexpected: Vec<String>,
}

impl LoadReport {
    /// Highest revision of any acknowledged write (0 if none).
    pub fn max_revision(&self) -> u64 {
        self.acked.values().map(|a| a.revision).max().unwrap_or(0)
    }

    fn merge(&mut self, other: LoadReport) {
        self.acked.extend(other.acked);
        self.acked_writes += other.acked_writes;
        self.indeterminate += other.indeterminate;
        self.refused += other.refused;
        self.unexpected.extend(other.unexpected);
    }
}

/// Running writer tasks.
pub struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<LoadReport>>,
}

impl Load {
    /// Starts `writers` tasks writing under `prefix` through `client`.
    pub fn start(client: &Client, writers: u64, prefix: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks = (0..writers)
            .map(|w| {
                tokio::spawn(write_loop(
                    client.clone(),
                    format!("{prefix}/w{w}"),
                    w,
                    stop.clone(),
                    acked.clone(),
                ))
            })
            .collect();
        Load { stop, acked, tasks }
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until `more` writes beyond the current count are acknowledged: the
    /// cluster is serving the load.
    pub async fn wait_progress(&self, more: usize, timeout: Duration) {
        let target = self.acked() + more;
        wait_until(
            timeout,
            &format!("{target} acknowledged writes"),
            async || self.acked() >= target,
        )
        .await;
    }

    /// Tells the writers to stop and collects what they saw.
    pub async fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut report = LoadReport::default();
        for task in self.tasks {
            let done = tokio::time::timeout(STOP_TIMEOUT, task).await;
            let writer = done
                .expect("a writer did not stop in time")
                .expect("a writer panicked");
            report.merge(writer);
        }
        report
    }
}

async fn write_loop(
    client: Client,
    prefix: String,
    writer: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> LoadReport {
    let started = tokio::time::Instant::now();
    let mut report = LoadReport::default();
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < LOAD_DURATION_MAX {
        seq += 1;
        let key = format!("{prefix}/k{}", seq % KEYS_PER_WRITER);
        let value = json!({"writer": writer, "seq": seq});
        match client
            .write(WriteRequest::new(key.clone(), value, "load"))
            .await
        {
            Ok(result) => {
                report.acked.insert(
                    key,
                    Acked {
                        seq,
                        version: result.version,
                        revision: result.revision,
                    },
                );
                report.acked_writes += 1;
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(ClientError::OutcomeUnknown { .. } | ClientError::Transport { .. }) => {
                report.indeterminate += 1
            }
            Err(ClientError::NoLeader { .. } | ClientError::Overloaded { .. }) => {
                report.refused += 1
            }
            Err(other) => report.unexpected.push(format!("{key} seq {seq}: {other}")),
        }
    }
    report
}

/// Reads every acknowledged key through `client` with `options` and checks it holds its
/// acknowledged write or a later one. Returns how many keys were checked.
pub async fn verify(client: &Client, report: &LoadReport, options: ReadOptions, on: &str) -> usize {
    assert!(
        report.unexpected.is_empty(),
        "unexpected write errors: {:#?}",
        report.unexpected
    );
    for (key, acked) in &report.acked {
        let read = client
            .read(key, options)
            .await
            .unwrap_or_else(|e| panic!("{on}: reading acknowledged key {key}: {e}"));
        let record = read.record;
        let seq = record
            .value
            .as_ref()
            .and_then(|v| v.get("seq"))
            .and_then(Value::as_u64);
        let context = format!(
            "{on}: key {key}: acknowledged {acked:?}, read version {} value {:?}",
            record.version, record.value
        );
        assert_eq!(record.state, State::Active, "{context}");
        assert!(
            record.version >= acked.version,
            "lost write (version went back): {context}"
        );
        assert!(
            record.revision >= acked.revision,
            "lost write (revision went back): {context}"
        );
        let seq = seq.unwrap_or_else(|| panic!("no seq in the value: {context}"));
        if record.version == acked.version {
            assert_eq!(seq, acked.seq, "same version, different value: {context}");
        } else {
            assert!(
                seq > acked.seq,
                "a later version holds an older write: {context}"
            );
        }
    }
    report.acked.len()
}
