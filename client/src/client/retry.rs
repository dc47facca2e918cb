//! Retries: the [`RetryPolicy`], which failures each kind of call retries ([`Mode`]),
//! `request_id`s, and [`ClientError::OutcomeUnknown`] for a mutation whose outcome no
//! attempt settled.

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;

use super::routing::Route;
use super::transport::Call;
use super::{Client, Result};
use crate::error::ClientError;

/// Default number of retries after the first attempt of a call. With the default backoff
/// (ceilings 50, 100, ... 1600, 2000, 2000 ms, each jittered to half-to-all) a call waits
/// 3.6 to 7.2 s in all: longer than a leader crash leaves the cluster without a leader at
/// the default Raft timings (followers keep the dead leader's lease for
/// `election_timeout_max_ms` = 800 ms, then elect within another 400-800 ms), so the
/// default call rides through a failover instead of failing in the middle of it.
pub const RETRIES_MAX_DEFAULT: u32 = 8;
/// Default first backoff; each retry doubles it up to the maximum.
pub const BACKOFF_MS_MIN_DEFAULT: u64 = 50;
/// Default backoff ceiling: long enough to span a Raft election.
pub const BACKOFF_MS_MAX_DEFAULT: u64 = 2_000;
/// Doublings of the backoff before the ceiling applies anyway (keeps the shift in range).
const BACKOFF_DOUBLINGS_MAX: u32 = 20;

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub retries_max: u32,
    pub backoff_ms_min: u64,
    pub backoff_ms_max: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries_max: RETRIES_MAX_DEFAULT,
            backoff_ms_min: BACKOFF_MS_MIN_DEFAULT,
            backoff_ms_max: BACKOFF_MS_MAX_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based): exponential, capped, and jittered to
    /// between half and all of it so clients that failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(BACKOFF_DOUBLINGS_MAX);
        let ceiling = self
            .backoff_ms_min
            .saturating_mul(1 << doublings)
            .min(self.backoff_ms_max)
            .max(1);
        Duration::from_millis(rand::thread_rng().gen_range(ceiling / 2..=ceiling))
    }
}

/// Which failures a call may retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Mode {
    /// Side-effect free: retry every transient failure.
    Read,
    /// Deduplicated by this `request_id`: retry every transient failure; report an unknown
    /// outcome as `OutcomeUnknown`.
    Mutation(String),
    /// Not deduplicated (membership changes): retry only failures that cannot have
    /// reached the node.
    Admin,
    /// One attempt at one node (per-node status, metrics, compaction).
    Once,
}

impl Client {
    /// Runs `call` with the retry rules of its mode; `finish` turns a success response
    /// into the result (its failures are retried like the request's own).
    ///
    /// - At most `retries_max + 1` attempts, and none begun or waited for past the call
    ///   timeout, when there is one ([`ClientBuilder::call_timeout`]).
    /// - A definite answer ends the call at once; only transient failures are retried.
    /// - A call that gives up after some node answered ends with that answer unless its own
    ///   last failure says more (a mutation that may have been applied).
    ///
    /// [`ClientBuilder::call_timeout`]: super::ClientBuilder::call_timeout
    pub(super) async fn call<T, F, Fut>(&self, call: &Call<'_>, finish: F) -> Result<T>
    where
        F: Fn(reqwest::Response) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let retries_max = match call.mode {
            Mode::Once => 0,
            _ => self.retry.retries_max,
        };
        let deadline = self.call_deadline();
        let mut may_have_applied = false;
        let mut retries = 0;
        // The last answer a node gave (503 `no_leader`, `overloaded`, ...): a call that
        // ends on an unreachable node after another one answered ends with that answer,
        // so "unreachable" means that no node was reached, whatever the endpoints' order.
        let mut last_answer: Option<ClientError> = None;
        // The node the last attempt failed at: a spread call tries the next one after it.
        let mut failed_at: Option<String> = None;
        loop {
            let attempt = self.attempt_within(deadline, call, failed_at.as_deref(), &finish);
            let (base, err) = match attempt.await {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            // A definite answer is authoritative even after an attempt with an unknown
            // outcome: the retry carried the same request_id, so the node replayed it.
            if !err.is_transient() {
                return Err(err);
            }
            if let Some(base) = &base {
                if matches!(call.route, Route::Leader | Route::CurrentLeader) {
                    self.nodes.forget_leader(base);
                }
                match err {
                    ClientError::Transport { .. } => self.nodes.failed(base),
                    _ => self.nodes.answered(base),
                }
            }
            may_have_applied |= err.may_have_applied();
            let unsafe_to_retry = call.mode == Mode::Admin && err.may_have_applied();
            let pause = self.retry.backoff(retries + 1);
            let out_of_time = deadline.is_some_and(|at| Instant::now() + pause >= at);
            if unsafe_to_retry || retries >= retries_max || out_of_time {
                // A failure that says nothing about the cluster gives way to the last
                // answer a node gave: one whose request never left, or any transport
                // failure of a read (which changes nothing). A mutation's request that may
                // have reached a node says so itself (`outcome_unknown`).
                let says_nothing = match &err {
                    ClientError::Transport { sent, .. } => !sent || call.mode == Mode::Read,
                    _ => false,
                };
                let err = match (says_nothing, last_answer) {
                    (true, Some(answer)) => answer,
                    _ => err,
                };
                return Err(give_up(&call.mode, err, may_have_applied));
            }
            if !matches!(err, ClientError::Transport { .. }) {
                last_answer = Some(err);
            }
            failed_at = base;
            retries += 1;
            tokio::time::sleep(pause).await;
        }
    }

    /// One attempt: find the node, send, `finish` the answer, all before `deadline`. A
    /// failure comes with the node tried (`None` when the deadline passed before one was
    /// chosen).
    async fn attempt_within<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        call: &Call<'_>,
        failed_at: Option<&str>,
        finish: &F,
    ) -> std::result::Result<T, (Option<String>, ClientError)>
    where
        F: Fn(reqwest::Response) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let out_of_time_finding_the_leader = || {
            // Nothing was sent to any node: no time was left, or it ran out while asking
            // the nodes which one leads.
            let asked = self.endpoints().join(",");
            (None, self.out_of_time(&asked, "finding the leader", false))
        };
        // A future that is ready at once beats a passed deadline (`timeout_at` polls the
        // work first), so a call with no time left is stopped here, before anything is sent.
        if deadline.is_some_and(|at| Instant::now() >= at) {
            return Err(out_of_time_finding_the_leader());
        }
        let Some(base) = before(deadline, self.base_after(call.route, failed_at, deadline)).await
        else {
            return Err(out_of_time_finding_the_leader());
        };
        let attempt = async {
            let response = self.attempt(&base, call).await?;
            finish(response).await
        };
        match before(self.attempt_deadline(call, deadline), attempt).await {
            Some(Ok(value)) => {
                self.nodes.answered(&base);
                Ok(value)
            }
            Some(Err(err)) => Err((Some(base), err)),
            // The request may have reached the node: cut off, not refused.
            None => {
                let err = self.out_of_time(&base, "waiting for the answer", true);
                Err((Some(base), err))
            }
        }
    }

    /// When one attempt of `call` must end: by the call's `deadline`, except that a call
    /// another try could serve elsewhere leaves half the time that remains to it, so a
    /// node that holds requests without answering (a paused process) cannot spend a
    /// short call budget alone:
    ///
    /// - a spread call (a read any node may serve) among several nodes: the next node;
    /// - a read or a deduplicated mutation sent to the leader: a paused leader is
    ///   replaced by an election within about an election timeout, and the retry (under
    ///   the same `request_id`) reaches the new one. A membership or principal change,
    ///   which no `request_id` makes safe to send twice, keeps the whole time.
    fn attempt_deadline(&self, call: &Call<'_>, deadline: Option<Instant>) -> Option<Instant> {
        let retried_elsewhere = match call.route {
            Route::Spread => true,
            Route::Leader | Route::CurrentLeader => {
                matches!(call.mode, Mode::Read | Mode::Mutation(_))
            }
            Route::At(_) => false,
        };
        let shares_time = retried_elsewhere && self.endpoints().len() > 1;
        match deadline {
            Some(at) if shares_time => {
                let now = Instant::now();
                Some(now + at.saturating_duration_since(now) / 2)
            }
            at => at,
        }
    }

    /// When a call starting now must end: its call timeout from now, or the client's
    /// deadline ([`Client::until`]) if that comes first.
    fn call_deadline(&self) -> Option<Instant> {
        let by_timeout = self.timeouts.call.map(|bound| Instant::now() + bound);
        match (by_timeout, self.timeouts.deadline) {
            (Some(timeout), Some(deadline)) => Some(timeout.min(deadline)),
            (timeout, deadline) => timeout.or(deadline),
        }
    }

    /// The failure of a call whose time ran out while `doing` something at `endpoint`.
    fn out_of_time(&self, endpoint: &str, doing: &str, sent: bool) -> ClientError {
        let bound = match self.timeouts.call {
            Some(timeout) => format!("the call timeout of {} ms", timeout.as_millis()),
            None => "the caller's deadline".to_string(),
        };
        ClientError::Transport {
            endpoint: endpoint.to_string(),
            message: format!("{bound} ran out {doing}"),
            sent,
        }
    }
}

/// `work`'s output, or `None` once `deadline` passed without it.
async fn before<T>(deadline: Option<Instant>, work: impl Future<Output = T>) -> Option<T> {
    match deadline {
        None => Some(work.await),
        Some(at) => tokio::time::timeout_at(at.into(), work).await.ok(),
    }
}

/// The error a call ends with once it stops retrying: a mutation that may have been
/// applied is `outcome_unknown` under its `request_id` (the last error as it was, when it
/// already says so); a membership or principal change, which carries none, is
/// `outcome_unknown` without one, to be settled by reading the state.
fn give_up(mode: &Mode, last: ClientError, may_have_applied: bool) -> ClientError {
    match (mode, last) {
        (_, last @ ClientError::OutcomeUnknown { .. }) => last,
        (Mode::Mutation(request_id), last) if may_have_applied => ClientError::OutcomeUnknown {
            request_id: Some(request_id.clone()),
            message: last.to_string(),
            details: Default::default(),
        },
        (Mode::Admin, last) if may_have_applied => ClientError::OutcomeUnknown {
            request_id: None,
            message: format!(
                "{last}; the request carried no request_id: read the state to learn whether \
                 it was applied"
            ),
            details: Default::default(),
        },
        (_, last) => last,
    }
}

/// A fresh 128-bit `request_id`, 32 hex characters: the Unix time in milliseconds (48 bits)
/// followed by 80 random bits.
///
/// Why time first: every replica keeps one dedup record per id in a sorted store (a
/// RocksDB skiplist, then SST files), and ids that arrive in increasing order are inserted
/// next to the previous ones instead of at a random place, and expire from one end. With
/// uniformly random ids the dedup insert was one of three random-position inserts per
/// write on every node; `node/examples/apply_bench` (100k keys, 32 upserts per entry,
/// three interleaved runs of a build that switched between the two formats) measured 12.8 /
/// 14.2 / 11.8 µs per upsert with random ids and 11.0 / 11.5 / 10.6 with time-ordered ones. Uniqueness rests on the 80 random bits
/// within one millisecond; a clock that steps back costs locality, never correctness.
pub fn new_request_id() -> String {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let random: [u8; 10] = rand::random();
    format!("{:012x}{}", unix_ms & 0xffff_ffff_ffff, hex::encode(random))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ReadOptions;
    use crate::client::test_support::*;
    use crate::fake_node::{FakeNode, Reply};

    #[test]
    fn backoff_stays_within_bounds() {
        let policy = RetryPolicy {
            retries_max: 9,
            backoff_ms_min: 10,
            backoff_ms_max: 100,
        };
        for attempt in 1..=64 {
            let ms = policy.backoff(attempt).as_millis() as u64;
            let ceiling = (10u64 << (attempt - 1).min(20)).min(100);
            assert!(
                ms >= ceiling / 2 && ms <= ceiling,
                "attempt {attempt}: {ms}"
            );
        }
    }

    #[test]
    fn giving_up_names_an_unknown_outcome_once() {
        let mode = Mode::Mutation("r1".into());
        let from_node = ClientError::OutcomeUnknown {
            request_id: Some("r1".into()),
            message: "not applied within 5000 ms".into(),
            details: Default::default(),
        };
        let kept = give_up(&mode, from_node, true).to_string();
        assert_eq!(
            kept,
            "outcome_unknown: not applied within 5000 ms (request_id r1)"
        );
        let cut = ClientError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            message: "connection reset".into(),
            sent: true,
        };
        match give_up(&mode, cut, true) {
            ClientError::OutcomeUnknown {
                request_id,
                message,
                ..
            } => {
                assert_eq!(request_id.as_deref(), Some("r1"));
                assert!(message.contains("connection reset"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_membership_or_principal_change_cut_off_is_an_unknown_outcome_without_an_id() {
        let cut = ClientError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            message: "the call timeout of 2000 ms ran out waiting for the answer".into(),
            sent: true,
        };
        let given_up = give_up(&Mode::Admin, cut, true);
        assert!(
            matches!(
                &given_up,
                ClientError::OutcomeUnknown {
                    request_id: None,
                    ..
                }
            ),
            "{given_up:?}"
        );
        let shown = given_up.to_string();
        assert!(
            shown.ends_with("read the state to learn whether it was applied"),
            "{shown}"
        );
        assert!(!shown.contains("(request_id"), "{shown}");
        // Refused before it was sent: the failure as it was.
        let refused = ClientError::Transport {
            endpoint: "http://127.0.0.1:1".into(),
            message: "connection refused".into(),
            sent: false,
        };
        let given_up = give_up(&Mode::Admin, refused, false);
        assert!(
            matches!(given_up, ClientError::Transport { sent: false, .. }),
            "{given_up:?}"
        );
    }

    #[test]
    fn request_ids_are_128_bit_hex_led_by_the_time_in_milliseconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (a, b) = (new_request_id(), new_request_id());
        for id in [&a, &b] {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
            let ms = u64::from_str_radix(&id[..12], 16).unwrap();
            assert!(
                ms >= before && ms < before + 60_000,
                "{id}: {ms} vs {before}"
            );
        }
        assert_ne!(a, b);
        assert!(a[..12] <= b[..12], "time prefix went back: {a} then {b}");
    }

    #[tokio::test]
    async fn a_lost_answer_is_retried_with_the_same_request_id_and_payload() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Drop,
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        let result = pinned(&node).write(write_request()).await.unwrap();
        assert_eq!(result.revision, 5);
        let seen = node.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen[0].body, seen[1].body,
            "retry resends the identical payload"
        );
        let request_id = body(&seen[0])["request_id"].as_str().unwrap().to_string();
        assert_eq!(request_id.len(), 32);
    }

    #[tokio::test]
    async fn a_caller_request_id_is_kept() {
        let node = FakeNode::start(|_, _| ok(mutation_result(1, 5))).await;
        let mut request = write_request();
        request.request_id = Some("mine".into());
        pinned(&node).write(request).await.unwrap();
        assert_eq!(body(&node.seen()[0])["request_id"], "mine");
    }

    #[tokio::test]
    async fn never_answered_mutations_are_outcome_unknown() {
        let node = FakeNode::start(|_, _| Reply::Drop).await;
        let err = pinned(&node).write(write_request()).await.unwrap_err();
        let seen = node.seen();
        assert_eq!(seen.len(), RETRIES as usize + 1);
        let sent_id = body(&seen[0])["request_id"].as_str().unwrap().to_string();
        assert!(seen
            .iter()
            .all(|s| body(s)["request_id"] == sent_id.as_str()));
        assert!(
            matches!(&err, ClientError::OutcomeUnknown { request_id: Some(id), .. } if *id == sent_id),
            "{err:?}"
        );
    }

    /// A client pinned to `node` whose calls end after `call_timeout`, though each of
    /// its attempts may take 5 s and it may retry `retries` times.
    fn timed(node: &FakeNode, call_timeout: Duration, retries: u32) -> Client {
        fast(vec![node.addr.clone()])
            .retries_max(retries)
            .backoff_ms(20, 50)
            .call_timeout(call_timeout)
            .build()
            .unwrap()
            .pinned(&node.addr)
            .unwrap()
    }

    /// The error of a write through `client` to a node that never answers, which must
    /// come well before one attempt's own 5 s (`fast`): only a bound of 300 ms cuts it.
    async fn cut_short(client: &Client) -> ClientError {
        let started = Instant::now();
        let err = client.write(write_request()).await.unwrap_err();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(4), "{took:?}");
        err
    }

    #[tokio::test]
    async fn a_mutation_cut_off_by_the_call_timeout_is_outcome_unknown_under_its_id() {
        let node = FakeNode::start(|_, _| Reply::Hang).await;
        let err = cut_short(&timed(&node, Duration::from_millis(300), RETRIES)).await;
        let seen = node.seen();
        assert_eq!(seen.len(), 1, "no attempt begins past the call timeout");
        let sent_id = body(&seen[0])["request_id"].as_str().unwrap().to_string();
        match &err {
            ClientError::OutcomeUnknown {
                request_id,
                message,
                ..
            } => {
                assert_eq!(request_id.as_deref(), Some(sent_id.as_str()));
                assert!(
                    message.contains("call timeout of 300 ms ran out waiting for the answer"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_call_out_of_time_ends_with_the_last_answer_a_node_gave() {
        let node = FakeNode::start(|_, i| match i {
            0 => no_leader(),
            _ => Reply::Hang,
        })
        .await;
        let err = timed(&node, Duration::from_millis(400), 1_000)
            .read("k", ReadOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::NoLeader { .. }), "{err:?}");
        assert_eq!(
            node.seen().len(),
            2,
            "the second attempt hung until the timeout"
        );
    }

    #[tokio::test]
    async fn retries_stop_at_the_call_timeout_though_more_are_allowed() {
        let node = FakeNode::start(|_, _| no_leader()).await;
        let err = timed(&node, Duration::from_millis(300), 1_000)
            .read("k", ReadOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::NoLeader { .. }), "{err:?}");
        // Backoff of 10-50 ms between attempts: at most about 30 fit in 300 ms.
        let attempts = node.seen().len();
        assert!((2..40).contains(&attempts), "{attempts} attempts");
    }

    #[tokio::test]
    async fn a_deadline_ends_a_call_before_its_call_timeout() {
        let node = FakeNode::start(|_, _| Reply::Hang).await;
        let client = timed(&node, Duration::from_secs(30), RETRIES);
        let err = cut_short(&client.until(Instant::now() + Duration::from_millis(300))).await;
        assert!(matches!(err, ClientError::OutcomeUnknown { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn a_call_with_no_time_left_sends_nothing() {
        let node = FakeNode::start(|_, _| Reply::Hang).await;
        let client = timed(&node, Duration::from_secs(30), RETRIES);
        let err = client
            .until(Instant::now())
            .write(write_request())
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Transport { sent: false, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("ran out finding the leader"),
            "{err}"
        );
        assert!(node.seen().is_empty(), "{:?}", node.seen());
    }

    #[tokio::test]
    async fn unreachable_nodes_are_a_transport_failure_not_an_unknown_outcome() {
        let client = fast(vec!["127.0.0.1:1".into()]).build().unwrap();
        let err = client
            .pinned("127.0.0.1:1")
            .unwrap()
            .write(write_request())
            .await;
        assert!(
            matches!(err, Err(ClientError::Transport { sent: false, .. })),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_node_that_answered_is_heard_over_one_that_could_not_be_reached() {
        let node = FakeNode::start(|_, _| no_leader()).await;
        // Every order of the endpoints, and a read as well as a mutation: the call ends
        // with the node's answer, never with the dead endpoint's connection error.
        for endpoints in [
            vec!["127.0.0.1:1".to_string(), node.addr.clone()],
            vec![node.addr.clone(), "127.0.0.1:1".to_string()],
        ] {
            let client = fast(endpoints.clone()).build().unwrap();
            let wrote = client.write(write_request()).await.unwrap_err();
            assert!(
                matches!(wrote, ClientError::NoLeader { .. }),
                "{endpoints:?}: {wrote:?}"
            );
            let read = client
                .read("k", crate::api::ReadOptions::default())
                .await
                .unwrap_err();
            assert!(
                matches!(read, ClientError::NoLeader { .. }),
                "{endpoints:?}: {read:?}"
            );
        }
    }

    #[tokio::test]
    async fn definite_errors_are_not_retried() {
        let node = FakeNode::start(|_, _| {
            Reply::Json(
                409,
                r#"{"error":{"code":"version_conflict","message":"m","current_version":4}}"#.into(),
            )
        })
        .await;
        let err = pinned(&node).write(write_request()).await.unwrap_err();
        assert!(matches!(
            err,
            ClientError::VersionConflict {
                current_version: Some(4),
                ..
            }
        ));
        assert_eq!(node.seen().len(), 1);
    }

    #[tokio::test]
    async fn no_leader_is_retried_then_succeeds() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Json(
                503,
                r#"{"error":{"code":"no_leader","message":"election"}}"#.into(),
            ),
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        assert!(pinned(&node).write(write_request()).await.is_ok());
        assert_eq!(node.seen().len(), 2);
    }
}
