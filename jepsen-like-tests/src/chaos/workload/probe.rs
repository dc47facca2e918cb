//! The liveness probe run after every heal. It passes when, within the bound:
//!
//! 1. a fresh client (all base nodes) writes a probe key and reads it back
//!    linearizably, and
//! 2. every member node has applied that write (so no member is left behind: a node
//!    whose consensus died while its HTTP side keeps answering is caught here, at the
//!    heal where it happened, not only at the end).

use std::time::{Duration, Instant};

use cairn_api::Consistency;
use cairn_client::new_request_id;

use super::{client_for, exec};
use crate::chaos::cluster::Cluster;
use crate::chaos::history::{Input, Outcome, Probe, Recorder, Workload};
use crate::chaos::supervisor::endpoint;

const RETRY_PAUSE: Duration = Duration::from_millis(200);

fn write(rec: &Recorder, key: &str) -> Input {
    Input::Write {
        key: key.to_string(),
        value: rec.unique_value(),
        expected_version: None,
        based_on_revision: None,
        clear_tombstone: false,
        override_revocation: false,
        request_id: new_request_id(),
    }
}

fn read(key: &str) -> Input {
    Input::Read {
        key: key.to_string(),
        consistency: Consistency::Linearizable,
        max_staleness_ms: None,
        session: false,
        node: None,
        known: None,
        handoff_forget_version: None,
    }
}

/// A write and its linearizable read back; `Ok(revision)` of the write.
async fn round_trip(
    rec: &Recorder,
    client: &cairn_client::Client,
    process: u64,
    key: &str,
) -> Result<u64, String> {
    let w = exec::mutate(rec, process, Workload::Probe, client, write(rec, key)).await;
    let revision = match (w.outcome, w.mut_results().first()) {
        (Outcome::Ok, Some(m)) => m.revision,
        _ => return Err(format!("write: {}", w.error_code().unwrap_or("?"))),
    };
    let r = exec::read(rec, process, Workload::Probe, client, read(key)).await;
    match r.outcome {
        Outcome::Ok => Ok(revision),
        _ => Err(format!("read: {}", r.error_code().unwrap_or("?"))),
    }
}

/// Probes until success or `bound`; records and returns the probe.
pub async fn run(
    rec: &Recorder,
    cluster: &Cluster,
    process: u64,
    after: &str,
    bound: Duration,
) -> Probe {
    let started_at = rec.clock.now();
    let started = Instant::now();
    let client = client_for(cluster.base.iter().map(|id| endpoint(*id)).collect());
    let key = format!("probe/{process}");
    let mut last_error = String::from("no answer");
    let mut revision = None;
    while started.elapsed() < bound {
        let Some(rev) = revision else {
            match round_trip(rec, &client, process, &key).await {
                Ok(rev) => revision = Some(rev),
                Err(e) => {
                    last_error = e;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            continue;
        };
        let members = cluster.members();
        let behind: Vec<String> = cluster
            .statuses(&members)
            .await
            .into_iter()
            .filter_map(|(id, s)| match s {
                Some(s) if s.applied_index >= rev => None,
                Some(s) => Some(format!("node {id} applied {} < {rev}", s.applied_index)),
                None => Some(format!("node {id} not answering")),
            })
            .collect();
        if behind.is_empty() {
            let probe = Probe {
                after: after.to_string(),
                started: started_at,
                took: Some(started.elapsed().as_micros() as u64),
                error: None,
            };
            rec.probe(probe.clone());
            return probe;
        }
        last_error = format!("write acknowledged, but {}", behind.join(", "));
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    let probe = Probe {
        after: after.to_string(),
        started: started_at,
        took: None,
        error: Some(last_error),
    };
    rec.probe(probe.clone());
    probe
}
