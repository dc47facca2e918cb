//! The read path's consistency checks (SPEC §3).
//!
//! - **Linearizable** (leader only): a ReadIndex round — openraft confirms leadership with
//!   a quorum and returns the index to wait for. Concurrent reads share rounds: a read that
//!   arrives while a round is in flight joins the *next* round, which starts after it
//!   arrived, so sharing never weakens linearizability.
//! - **Bounded**: a read token is a quorum-confirmed commit index together with the local
//!   monotonic instant at which it was *requested*. A read is served while the token is
//!   younger than `max_staleness_ms` and the node has applied the token's index. Tokens are
//!   refreshed in the background while bounded reads are being asked for, and at once when
//!   a read finds none fresh enough for its bound (one refresh at a time, shared by every
//!   reader waiting): so a tight bound, or the first read after an idle spell, costs one
//!   ReadIndex round trip instead of failing or waiting for the next periodic refresh. A
//!   node cut off from the majority (or following a deposed leader) gets no new token, and
//!   refuses.
//! - `min_revision`: wait (bounded) until the local state machine has applied it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_config::ReadsConfig;
use openraft::ServerState;
use tokio::sync::{oneshot, watch, Notify};

use super::types::{NodeId, NodeInfo, Raft};
use crate::planted::{self, Bug};
use crate::raft_rpc::network::PeerClient;

/// Bounded reads stop refreshing tokens after this long without demand.
const DEMAND_WINDOW: Duration = Duration::from_secs(2);
/// `last_demand_ms` of a node no `bounded` or `any` read has reached yet: it refreshes
/// nothing until one does.
const NEVER_DEMANDED: u64 = u64::MAX;
/// How often a ReadIndex round asks a majority to confirm the leader before it refuses.
const CONFIRM_ATTEMPTS: u32 = 3;
/// Pause before asking again after a refused confirmation: a refusal that comes at once
/// (no quorum reachable) must not spin.
const CONFIRM_RETRY_PAUSE: Duration = Duration::from_millis(10);

#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("not the leader")]
    NotLeader {
        leader_id: Option<NodeId>,
        leader: Option<NodeInfo>,
    },
    #[error("{0}")]
    StaleRead(String),
    /// This node has not applied `awaited` (a `min_revision`, or the commit index a read
    /// token named) within `waited_ms`. Its answer carries both indexes, so a client can
    /// tell a node behind its session from a freshness it asked for itself.
    #[error("applied index {applied} has not reached {awaited} within {waited_ms} ms")]
    NotApplied {
        applied: u64,
        awaited: u64,
        waited_ms: u128,
    },
}

/// A quorum-confirmed commit index and the local instant it was asked for.
#[derive(Debug, Clone, Copy)]
pub struct Token {
    pub index: u64,
    pub asked_at: Instant,
}

/// The newest token, and the instant before which no token is kept ([`ReadGate::elected`]).
/// One lock holds both, so a refresh finishing while the node is elected cannot slip in a
/// token asked of the old leader after the election dropped it.
#[derive(Debug, Default)]
struct TokenSlot {
    token: Option<Token>,
    kept_from: Option<Instant>,
}

impl TokenSlot {
    /// Keeps `token` if it was asked after the last election and after the one held.
    fn keep(&mut self, token: Token) -> bool {
        let after_election = self.kept_from.is_none_or(|from| token.asked_at >= from);
        let newer = self.token.is_none_or(|old| token.asked_at > old.asked_at);
        if after_election && newer {
            self.token = Some(token);
        }
        after_election && newer
    }
}

type RoundReply = oneshot::Sender<Result<u64, ReadError>>;

pub struct ReadGate {
    raft: Raft,
    peer: PeerClient,
    cfg: ReadsConfig,
    rpc_timeout: Duration,
    applied: Arc<watch::Sender<u64>>,
    /// Readers waiting for the next ReadIndex round; `None` when no round is running.
    round_waiters: Mutex<Option<Vec<RoundReply>>>,
    token: Mutex<TokenSlot>,
    token_changed: Notify,
    /// Wakes the refresher before its period is over: a reader found no fresh token.
    refresh_now: Notify,
    started: Instant,
    last_demand_ms: AtomicU64,
    pub rounds: AtomicU64,
    /// Confirmations asked again within a round after a refused one.
    pub confirm_retries: AtomicU64,
}

impl ReadGate {
    pub fn new(
        raft: Raft,
        peer: PeerClient,
        cfg: ReadsConfig,
        rpc_timeout: Duration,
        applied: Arc<watch::Sender<u64>>,
    ) -> Arc<ReadGate> {
        Arc::new(ReadGate {
            raft,
            peer,
            cfg,
            rpc_timeout,
            applied,
            round_waiters: Mutex::new(None),
            token: Mutex::new(TokenSlot::default()),
            token_changed: Notify::new(),
            refresh_now: Notify::new(),
            started: Instant::now(),
            last_demand_ms: AtomicU64::new(NEVER_DEMANDED),
            rounds: AtomicU64::new(0),
            confirm_retries: AtomicU64::new(0),
        })
    }

    pub fn applied_watch(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Age of the newest quorum-confirmed token in ms (`None` if never had one).
    pub fn token_age_ms(&self) -> Option<u64> {
        self.token()
            .map(|t| t.asked_at.elapsed().as_millis() as u64)
    }

    /// Called when this node becomes leader: drops its token, refuses any token asked
    /// before now (a refresh under way when it was elected), and forgets the demand for
    /// tokens that reads served while it followed left behind. A token asked of the old
    /// leader, or asked by the refresher on that demand just after the election, would
    /// otherwise age on a healthy leader that serves no reads; without one,
    /// `ms_since_leader_contact` is the age of the quorum's last heartbeat acknowledgement
    /// until a read asks for a token again. A bounded read finding none asks for one.
    pub fn elected(&self) {
        self.last_demand_ms.store(NEVER_DEMANDED, Ordering::Relaxed);
        let mut slot = self.token.lock().expect("token lock");
        slot.token = None;
        slot.kept_from = Some(Instant::now());
    }

    pub fn token_index(&self) -> Option<u64> {
        self.token().map(|t| t.index)
    }

    fn token(&self) -> Option<Token> {
        self.token.lock().expect("token lock").token
    }

    /// Linearizable read barrier on the leader: returns once a quorum confirmed leadership
    /// (in a round that started after this call) and the read index is applied.
    pub async fn linearizable(self: &Arc<Self>) -> Result<u64, ReadError> {
        if planted::active(Bug::StaleLeaderRead)
            && self.raft.metrics().borrow().state == ServerState::Leader
        {
            return Ok(self.applied_index());
        }
        let asked_at = Instant::now();
        let index = self.join_round().await?;
        self.store_token(Token { index, asked_at });
        self.wait_applied(index, Duration::from_millis(self.cfg.min_revision_wait_ms))
            .await?;
        Ok(index)
    }

    /// Catch-up barrier for a request that authenticates with no staleness bound of its
    /// own (whoami, compact, opening a watch): returns once this node has applied every
    /// entry the leader had committed when the barrier began, so a token rotated or
    /// deleted before the request arrived is unknown here too.
    ///
    /// - A token asked for now ([`Self::fresh_token_now`]), never a shared older one, then
    ///   the apply wait (`reads.min_revision_wait_ms`). The token is kept as the newest,
    ///   which bounded reads may use.
    /// - No known leader: `NotLeader`; the leader unreachable, or the index not applied
    ///   in time: `StaleRead`.
    pub async fn caught_up(self: &Arc<Self>) -> Result<u64, ReadError> {
        let token = self.fresh_token_now().await?;
        self.wait_applied(
            token.index,
            Duration::from_millis(self.cfg.min_revision_wait_ms),
        )
        .await?;
        Ok(token.index)
    }

    /// Bounded-staleness barrier: returns the token that justifies serving, after the
    /// node applied its index. Without a token fresh enough for `max_staleness` it asks
    /// the refresher for one at once and waits for it up to four refresh periods (a
    /// healthy cluster answers in one round trip), then refuses with `StaleRead`.
    pub async fn bounded(self: &Arc<Self>, max_staleness: Duration) -> Result<Token, ReadError> {
        self.note_demand();
        if planted::active(Bug::BoundedSkipsToken) {
            return Ok(Token {
                index: self.applied_index(),
                asked_at: Instant::now(),
            });
        }
        let wait_max = Duration::from_millis(self.cfg.token_refresh_ms * 4);
        let deadline = tokio::time::Instant::now() + wait_max;
        let mut asked = false;
        loop {
            let notified = self.token_changed.notified();
            if let Some(token) = self.fresh_token(max_staleness) {
                let remaining = max_staleness.saturating_sub(token.asked_at.elapsed());
                self.wait_applied(token.index, remaining).await?;
                return Ok(token);
            }
            if !asked {
                // A stored permit if a refresh is running: the refresher then runs one
                // more, asked after this read arrived.
                self.refresh_now.notify_one();
                asked = true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let age = self
                    .token_age_ms()
                    .map(|a| format!("{a} ms old"))
                    .unwrap_or_else(|| "none yet".into());
                return Err(ReadError::StaleRead(format!(
                    "no quorum-confirmed read token within {} ms (newest: {age})",
                    max_staleness.as_millis()
                )));
            }
        }
    }

    /// Keeps tokens refreshing for a while: bounded reads need them, and `any` reads report
    /// their age as `ms_since_leader_contact`.
    pub fn note_demand(&self) {
        self.last_demand_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn fresh_token(&self, max_staleness: Duration) -> Option<Token> {
        self.token()
            .filter(|t| t.asked_at.elapsed() <= max_staleness)
    }

    fn store_token(&self, token: Token) {
        if self.token.lock().expect("token lock").keep(token) {
            self.token_changed.notify_waiters();
        }
    }

    /// Waits until the local state machine has applied `index`, at most `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), ReadError> {
        let mut rx = self.applied.subscribe();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|applied| *applied >= index)).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ReadError::NotApplied {
                applied: self.applied_index(),
                awaited: index,
                waited_ms: timeout.as_millis(),
            }),
        }
    }

    async fn join_round(self: &Arc<Self>) -> Result<u64, ReadError> {
        let (tx, rx) = oneshot::channel();
        let start_round = {
            let mut waiters = self.round_waiters.lock().expect("round lock");
            match waiters.as_mut() {
                Some(queue) => {
                    queue.push(tx);
                    false
                }
                None => {
                    *waiters = Some(vec![tx]);
                    true
                }
            }
        };
        if start_round {
            let gate = self.clone();
            tokio::spawn(async move { gate.run_rounds().await });
        }
        rx.await
            .unwrap_or_else(|_| Err(ReadError::StaleRead("read round abandoned".into())))
    }

    /// Runs ReadIndex rounds until no reader is waiting. Each round serves exactly the
    /// readers that were queued before it started.
    async fn run_rounds(&self) {
        loop {
            let batch = {
                let mut waiters = self.round_waiters.lock().expect("round lock");
                let queue = waiters.as_mut().expect("a round runs only with a queue");
                if queue.is_empty() {
                    *waiters = None;
                    return;
                }
                std::mem::take(queue)
            };
            self.rounds.fetch_add(1, Ordering::Relaxed);
            let result = self.read_index_round().await;
            for reply in batch {
                let _ = reply.send(result.clone());
            }
        }
    }

    /// One ReadIndex round: the leader's commit index once a majority confirmed its
    /// leadership, asked up to [`CONFIRM_ATTEMPTS`] times within the round's deadline
    /// (twice `rpc_timeout`).
    ///
    /// - openraft gives each confirmation heartbeat only `raft.heartbeat_interval_ms`
    ///   (100 ms): a loaded follower that answers later fails the attempt although it
    ///   still follows this leader. Another attempt is as safe as the first (it starts
    ///   after every waiting read arrived), so a refusal is tried again instead of
    ///   answering every waiting reader 503 `stale_read`.
    /// - The attempts are few: a leader cut off from its majority refuses within a few
    ///   heartbeat intervals, so its readers soon try another node.
    /// - A node that is no longer leader stops at once (`NotLeader`, so reads can go to
    ///   the new one).
    async fn read_index_round(&self) -> Result<u64, ReadError> {
        let deadline = Instant::now() + self.rpc_timeout * 2;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let refused = match tokio::time::timeout(left, self.raft.get_read_log_id()).await {
                Ok(Ok((read_log_id, _))) => return Ok(read_log_id.map(|id| id.index).unwrap_or(0)),
                Ok(Err(e)) => {
                    // openraft's error quotes the whole membership: the log has it, the
                    // client gets the fact.
                    tracing::debug!(error = %e, "read round refused");
                    self.not_leader_or(
                        "leadership not confirmed: a majority of voters did not answer".into(),
                    )
                }
                Err(_) => {
                    return Err(ReadError::StaleRead(
                        "leadership confirmation timed out".into(),
                    ))
                }
            };
            if matches!(refused, ReadError::NotLeader { .. })
                || attempt == CONFIRM_ATTEMPTS
                || Instant::now() + CONFIRM_RETRY_PAUSE >= deadline
            {
                return Err(refused);
            }
            self.confirm_retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(CONFIRM_RETRY_PAUSE).await;
        }
    }

    fn not_leader_or(&self, message: String) -> ReadError {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state != ServerState::Leader {
            let leader = super::known_leader_node(&metrics);
            ReadError::NotLeader {
                leader_id: leader.as_ref().map(|(id, _)| *id),
                leader: leader.map(|(_, node)| node),
            }
        } else {
            ReadError::StaleRead(message)
        }
    }

    /// A read token asked for now, stored as the newest: a local round on the leader, a
    /// ReadIndex RPC to it elsewhere.
    async fn fresh_token_now(self: &Arc<Self>) -> Result<Token, ReadError> {
        let asked_at = Instant::now();
        let metrics = self.raft.metrics().borrow().clone();
        let index = if metrics.state == ServerState::Leader {
            self.join_round().await?
        } else {
            let Some((leader_id, leader)) = super::known_leader_node(&metrics) else {
                return Err(ReadError::NotLeader {
                    leader_id: None,
                    leader: None,
                });
            };
            self.peer
                .read_index(&leader.peer_addr, self.rpc_timeout)
                .await
                .map_err(|e| {
                    tracing::debug!(error = %e, leader_id, "read index refused");
                    ReadError::StaleRead(format!(
                        "could not learn the commit index of leader {leader_id}"
                    ))
                })?
        };
        let token = Token { index, asked_at };
        self.store_token(token);
        Ok(token)
    }

    /// Background refresher; ends when `shutdown` fires.
    pub async fn run_token_refresher(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let period = Duration::from_millis(self.cfg.token_refresh_ms);
        loop {
            let now_ms = self.started.elapsed().as_millis() as u64;
            let last_demand_ms = self.last_demand_ms.load(Ordering::Relaxed);
            let demanded = last_demand_ms != NEVER_DEMANDED
                && now_ms.saturating_sub(last_demand_ms) <= DEMAND_WINDOW.as_millis() as u64;
            if demanded {
                // A failure keeps the old token; bounded reads judge its age.
                let _ = self.fresh_token_now().await;
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.refresh_now.notified() => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(index: u64, asked_at: Instant) -> Token {
        Token { index, asked_at }
    }

    #[test]
    fn a_slot_keeps_only_newer_tokens() {
        let start = Instant::now();
        let mut slot = TokenSlot::default();
        assert!(slot.keep(token(5, start + Duration::from_millis(10))));
        assert!(
            !slot.keep(token(4, start)),
            "an older token replaced a newer one"
        );
        assert_eq!(slot.token.map(|t| t.index), Some(5));
        assert!(slot.keep(token(6, start + Duration::from_millis(20))));
        assert_eq!(slot.token.map(|t| t.index), Some(6));
    }

    #[test]
    fn a_slot_refuses_tokens_asked_before_the_election() {
        let start = Instant::now();
        let mut slot = TokenSlot {
            token: None,
            kept_from: Some(start + Duration::from_millis(100)),
        };
        assert!(!slot.keep(token(7, start + Duration::from_millis(99))));
        assert_eq!(slot.token.map(|t| t.index), None);
        assert!(slot.keep(token(8, start + Duration::from_millis(100))));
        assert_eq!(slot.token.map(|t| t.index), Some(8));
    }
}
