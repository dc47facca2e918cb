//! Write batching: concurrent client commands share one Raft entry.
//!
//! openraft 0.9 appends one entry per `client_write` and every entry costs a round of
//! replication, fsyncs and apply, so one command per entry would cap throughput at one
//! such round per command. The batcher proposes as soon as an in-flight slot is free
//! (at most `inflight_entries_max` entries proposed and not yet applied) and seals into
//! the entry every command that queued meanwhile (up to `ops_max`/`bytes_max`), then hands
//! each caller its own command's response. So a lone writer is never delayed, and under
//! load entries grow by themselves while earlier ones are being replicated. No timer is on
//! the path by default: tokio's timer has 1 ms resolution, and the former 200 µs linger
//! cost every low-load write a whole millisecond. `linger_us > 0` still waits that long
//! for company after the first command, for operators who prefer fuller entries.
//!
//! Every queue is bounded: a full queue answers `Overloaded` instead of growing.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_config::BatchingConfig;
use cairn_memory::{Command, CommandResponse};
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::types::{NodeId, NodeInfo, Raft, Request};

/// Why a command got no response from the state machine.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// This node is not the leader; the command was NOT appended anywhere.
    #[error("not the leader")]
    NotLeader {
        leader_id: Option<NodeId>,
        leader: Option<NodeInfo>,
    },
    /// The command may or may not have been committed (leader lost, node stopping).
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The queue is full; nothing was proposed.
    #[error("write queue full")]
    Overloaded,
}

struct Pending {
    command: Command,
    bytes: usize,
    reply: oneshot::Sender<Result<CommandResponse, WriteError>>,
}

#[derive(Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Pending>,
    /// How long `submit` waits for the state machine's answer (`commit_timeout_ms`).
    commit_timeout: Duration,
}

impl Batcher {
    /// Starts the batching task. It ends when every `Batcher` handle is dropped.
    pub fn start(raft: Raft, cfg: BatchingConfig, dedup_retention_ms: u64) -> Batcher {
        let (tx, rx) = mpsc::channel(cfg.queue_ops_max as usize);
        let commit_timeout = Duration::from_millis(cfg.commit_timeout_ms);
        tokio::spawn(run(raft, cfg, dedup_retention_ms, rx));
        Batcher { tx, commit_timeout }
    }

    /// Proposes one command and waits for its own response, at most `commit_timeout`:
    /// after that the answer is `OutcomeUnknown`, as the command may be queued, in flight
    /// or committed by a later leader (a leader cut off from its majority never commits
    /// and openraft's `client_write` would wait for ever).
    pub async fn submit(&self, command: Command) -> Result<CommandResponse, WriteError> {
        let bytes = approx_bytes(&command);
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Pending {
                command,
                bytes,
                reply,
            })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => WriteError::Overloaded,
                mpsc::error::TrySendError::Closed(_) => {
                    WriteError::OutcomeUnknown("node stopping".into())
                }
            })?;
        match tokio::time::timeout(self.commit_timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(WriteError::OutcomeUnknown(
                "write task ended before answering".into(),
            )),
            Err(_) => Err(WriteError::OutcomeUnknown(format!(
                "not applied within {} ms (no quorum?), it may still be",
                self.commit_timeout.as_millis()
            ))),
        }
    }
}

fn approx_bytes(command: &Command) -> usize {
    bincode::serialized_size(command)
        .map(|n| n as usize)
        .unwrap_or(usize::MAX)
}

async fn run(
    raft: Raft,
    cfg: BatchingConfig,
    dedup_retention_ms: u64,
    mut rx: mpsc::Receiver<Pending>,
) {
    let inflight = Arc::new(Semaphore::new(cfg.inflight_entries_max as usize));
    let linger = Duration::from_micros(cfg.linger_us);
    while let Some(first) = rx.recv().await {
        // The slot first, then the batch: what queued while every slot was busy joins it.
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let batch = gather(first, &mut rx, &cfg, linger).await;
        let raft = raft.clone();
        tokio::spawn(async move {
            propose(&raft, batch, dedup_retention_ms).await;
            drop(permit);
        });
    }
}

/// Seals `first` with the commands already queued, until the entry is full; with a
/// non-zero `linger`, also waits up to that long after `first` for more.
async fn gather(
    first: Pending,
    rx: &mut mpsc::Receiver<Pending>,
    cfg: &BatchingConfig,
    linger: Duration,
) -> Vec<Pending> {
    let deadline = tokio::time::Instant::now() + linger;
    let mut ops = first.command.mutations.len();
    let mut bytes = first.bytes;
    let mut batch = vec![first];
    while ops < cfg.ops_max as usize && bytes < cfg.bytes_max as usize {
        let next = match rx.try_recv() {
            Ok(p) => p,
            Err(_) if linger.is_zero() => break,
            Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(p)) => p,
                _ => break,
            },
        };
        ops += next.command.mutations.len();
        bytes = bytes.saturating_add(next.bytes);
        batch.push(next);
    }
    batch
}

async fn propose(raft: &Raft, batch: Vec<Pending>, dedup_retention_ms: u64) {
    let (commands, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|p| (p.command, p.reply)).unzip();
    let count = commands.len();
    let request = Request {
        now_ms: unix_ms(),
        dedup_retention_ms,
        commands: commands.into(),
        access: None,
    };
    match raft.client_write(request).await {
        Ok(written) => {
            let responses = written.data.responses;
            // Both sides of the log: the state machine answers every command it was given.
            assert_eq!(
                responses.len(),
                count,
                "state machine answered {} of {count} commands",
                responses.len()
            );
            for (reply, response) in replies.into_iter().zip(responses) {
                let _ = reply.send(Ok(response));
            }
        }
        Err(e) => {
            let error = classify(e);
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

/// `ForwardToLeader` is the one error that proves the entry is not in any log that can
/// commit it: either it was never appended, or it was truncated as a conflicting suffix
/// (a committed entry is never truncated). Everything else is indeterminate.
pub(crate) fn classify(e: RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>) -> WriteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteError::NotLeader {
            leader_id: f.leader_id,
            leader: f.leader_node,
        },
        other => WriteError::OutcomeUnknown(other.to_string()),
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
