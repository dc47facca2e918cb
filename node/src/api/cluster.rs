//! Operator endpoints (SPEC §6): init, join, remove, status, compact, healthz, metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_api::{
    AuthEnabled, ClusterStatus, CompactResponse, EnableAuthRequest, ErrorBody, ErrorCode, Health,
    InitRequest, MembershipResponse, NodeSpec, RemoveRequest,
};
use openraft::error::{ChangeMembershipError, ClientWriteError, InitializeError, RaftError};
use openraft::{ChangeMembers, ServerState};
use serde_json::json;

use super::addresses::MemberAddresses;
use super::admit;
use super::auth::{self, endpoints};
use super::body::{JsonBody, NoFields};
use super::error::ApiError;
use super::forward::{self, Kind};
use super::{role_name, App, SharedApp};
use cairn_config::PeerProof;

use crate::consensus::{NodeId, NodeInfo};
use crate::metrics::{counter, gauge};
use crate::raft_rpc::network::ProofAnswer;

type Result<T> = std::result::Result<T, ApiError>;

/// How long init with `auth` keeps trying to reach a leader to turn auth on.
const AUTH_ENABLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer of a relayed `/v1/auth/enable` read back (it is a few hundred bytes).
const ENABLE_ANSWER_BYTES_MAX: usize = 64 << 10;
/// How long compaction waits for the snapshot and the purge to land.
const COMPACT_STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often `/cluster/compact` repeats its snapshot request until a snapshot covers what
/// it must ([`snapshot_covering`]): a small state's build takes milliseconds.
const SNAPSHOT_ASK_INTERVAL: Duration = Duration::from_millis(500);
/// A voter counts as live when its replicated log is at most this far behind the leader's
/// and it answers `/healthz` within `LIVE_PROBE_TIMEOUT`.
const LIVE_LAG_ENTRIES_MAX: u64 = 10_000;
/// The replication metrics keep a dead or frozen voter's last matched index forever (on an
/// idle cluster it even equals the leader's last index), so liveness needs an answer too.
const LIVE_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a removal re-probes the voters while it waits for enough of them to show live
/// ([`removal_settle_window`]).
const LIVE_RECHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A node's addresses, checked as written. `at` is where the spec sits in the body
/// (`nodes[2].` in an init, empty for a join): errors name the field by its path.
fn node_info(spec: &NodeSpec, at: &str) -> Result<NodeInfo> {
    for (name, addr) in [
        ("client_addr", &spec.client_addr),
        ("peer_addr", &spec.peer_addr),
    ] {
        if !cairn_config::is_host_port(addr) {
            return Err(ApiError::invalid(format!(
                "node {}: {name} {addr:?}: must be HOST:PORT with a port from 1 to 65535, \
                 e.g. 127.0.0.1:7401",
                spec.id
            ))
            .with("field", format!("{at}{name}")));
        }
    }
    if !(1..=cairn_config::NODE_ID_MAX).contains(&spec.id) {
        return Err(ApiError::invalid(format!(
            "node id {} is out of range: ids are 1 to {} (2^53 - 1)",
            spec.id,
            cairn_config::NODE_ID_MAX
        ))
        .with("field", format!("{at}id")));
    }
    Ok(NodeInfo {
        client_addr: spec.client_addr.clone(),
        peer_addr: spec.peer_addr.clone(),
    })
}

/// Whether node `id` could serve at `info`'s addresses in this cluster: with a peer
/// secret, which proves nothing beyond one host (SPEC §8: "on loopback only"), the peer
/// address is on loopback: a member elsewhere would be sent the secret, or never reached.
/// (That they resolve, and to two addresses, is [`MemberAddresses::of_new`]'s check.)
fn check_usable(app: &App, id: NodeId, info: &NodeInfo, at: &str) -> Result<()> {
    if app.config.peer_proof() == PeerProof::Secret && !cairn_config::is_loopback(&info.peer_addr) {
        return Err(ApiError::invalid(format!(
            "node {id}: peer_addr {} is not on loopback, and this cluster's peers prove \
             themselves with a shared secret, which is for loopback peers only: use peer \
             TLS for a cluster across hosts",
            info.peer_addr
        ))
        .with("field", format!("{at}peer_addr")));
    }
    Ok(())
}

/// Nodes an init may list: far more than any Raft cluster has voters, and few enough
/// that checking every pair of them for a shared address costs nothing.
const INIT_NODES_MAX: usize = 64;

/// An init's members as written, in the body's order: at most [`INIT_NODES_MAX`], each
/// spec well formed, ids listed once. The body's own shape: checked on every node, before
/// whether it was initialized.
fn init_members(nodes: &[NodeSpec]) -> Result<Vec<(NodeId, NodeInfo)>> {
    if nodes.len() > INIT_NODES_MAX {
        return Err(ApiError::new(
            ErrorCode::TooLarge,
            format!("{} nodes, more than {INIT_NODES_MAX}", nodes.len()),
        )
        .with("field", "nodes")
        .with("limit", INIT_NODES_MAX)
        .with("size", nodes.len()));
    }
    let mut ids = BTreeSet::new();
    let mut members = Vec::with_capacity(nodes.len());
    for (i, spec) in nodes.iter().enumerate() {
        let at = format!("nodes[{i}].");
        let info = node_info(spec, &at)?;
        if !ids.insert(spec.id) {
            return Err(ApiError::invalid(format!("node {} listed twice", spec.id))
                .with("field", format!("{at}id")));
        }
        members.push((spec.id, info));
    }
    Ok(members)
}

/// Refuses an init that leaves out the receiving node: it could not be a member of the
/// cluster it starts.
fn includes_this_node(app: &App, members: &[(NodeId, NodeInfo)]) -> Result<()> {
    match members.iter().any(|(id, _)| *id == app.node_id) {
        true => Ok(()),
        false => Err(
            ApiError::invalid(format!("nodes must include this node ({})", app.node_id))
                .with("field", "nodes"),
        ),
    }
}

/// An init's addresses, checked as a whole: each node's are usable ([`check_usable`]),
/// resolve, and are its own (no socket address listed twice, however spelled), and this
/// node's entry names the addresses it listens on (a membership that gave it others would
/// have peers and clients look for it elsewhere).
async fn check_init_addresses(app: &App, members: &[(NodeId, NodeInfo)]) -> Result<()> {
    let mut checked: Vec<MemberAddresses<'_>> = Vec::with_capacity(members.len());
    for (i, (id, info)) in members.iter().enumerate() {
        let at = format!("nodes[{i}].");
        check_usable(app, *id, info, &at)?;
        let addresses = MemberAddresses::of_new(*id, info, &at).await?;
        if let Some((other, field)) = members
            .iter()
            .zip(&checked)
            .find_map(|((other, _), known)| Some((*other, addresses.shared_with(known)?)))
        {
            return Err(ApiError::invalid(format!(
                "node {id}: {field} {} is an address of node {other} too: every node has \
                 its own addresses",
                addresses.written(field)
            ))
            .with("field", format!("{at}{field}")));
        }
        if *id == app.node_id {
            check_own_addresses(app, info, &at)?;
        }
        checked.push(addresses);
    }
    Ok(())
}

/// The other first members of an init hold no cluster yet, and take this node's peer
/// requests. Refused with 409 `invalid_transition` and `id`, before anything is written,
/// when one answers otherwise:
/// - its membership lists it: it was initialized (alone, through another node of this
///   init already, or into another cluster). Made a member here, it would meet a second
///   leader in a term it led itself, with entries it committed that this cluster never
///   had, and openraft stops on an assertion at every start of that node;
/// - it refuses this node's proof (another secret, another CA, a certificate this node's
///   CA does not verify, another node at that address): it could never take the log.
///
/// A member that does not answer may not be started yet: the init goes on, and admits it
/// once it answers ([`admit::first_members`]).
async fn check_first_members_hold_no_cluster(
    app: &App,
    members: &[(NodeId, NodeInfo)],
) -> Result<()> {
    let timeout = Duration::from_millis(app.config.raft.rpc_timeout_ms);
    let others = members.iter().filter(|(id, _)| *id != app.node_id);
    let asked = others.map(|(id, info)| async move {
        let answer = app
            .peers
            .lists_member(*id, &info.peer_addr, *id, timeout)
            .await;
        (*id, info, answer)
    });
    for (id, info, answer) in futures::future::join_all(asked).await {
        let why = match answer {
            Ok(true) => format!("node {id} already belongs to a cluster (its membership lists it)"),
            Ok(false) => continue,
            Err(failed) => match failed.definite() {
                Some(refusal) => format!(
                    "node {id} at {} cannot take this node's peer requests ({refusal})",
                    info.peer_addr
                ),
                None => continue,
            },
        };
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "{why}: a cluster is initialized from nodes that hold no Raft state and take \
                 each other's peer proof; nothing changed"
            ),
        )
        .with("id", id));
    }
    Ok(())
}

/// This node's entry in an init names the addresses it listens on: the same socket
/// address, or, for a port bound to every interface (`0.0.0.0`, `::`), the same port.
fn check_own_addresses(app: &App, info: &NodeInfo, at: &str) -> Result<()> {
    for (field, given, own) in [
        ("client_addr", &info.client_addr, &app.config.client_addr),
        ("peer_addr", &info.peer_addr, &app.config.peer_addr),
    ] {
        if !names_listener(given, own) {
            return Err(ApiError::invalid(format!(
                "node {} (this node) listens on {own}, but {field} is {given}",
                app.node_id
            ))
            .with("field", format!("{at}{field}")));
        }
    }
    Ok(())
}

/// Whether `given` reaches the listener bound at `own`.
fn names_listener(given: &str, own: &str) -> bool {
    let (Some(given), Some(own)) = (cairn_config::resolve(given), cairn_config::resolve(own))
    else {
        return given == own;
    };
    own.iter().any(|own| {
        given.iter().any(|given| {
            given.port() == own.port() && (own.ip().is_unspecified() || given.ip() == own.ip())
        })
    })
}

/// `POST /cluster/init`. Once auth is on the caller needs `admin` (401/403 first, as on
/// every membership call: SPEC §8); then a node that is part of a cluster already answers
/// 409 whatever the body names (SPEC §6: "before looking at the addresses"), without
/// touching Raft, so no caller learns more than "initialized" and none can make openraft
/// log a refused initialization; only then is the body checked (413, 400).
pub async fn init(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<InitRequest>,
) -> Result<Response> {
    require_admin(&app, &headers)?;
    // The body's own shape first, so bad input is the same 400 or 413 on every node,
    // initialized or not (docs/api.md: "before the 409").
    let members = init_members(&body.value.nodes)?;
    if let Some(auth) = &body.value.auth {
        cairn_access::validate::new_name("auth.admin", &auth.admin)?;
    }
    if initialized(&app) {
        return Err(already_initialized());
    }
    includes_this_node(&app, &members)?;
    check_init_addresses(&app, &members).await?;
    check_first_members_hold_no_cluster(&app, &members).await?;
    admit::first_members(&app, &members).await?;
    match app
        .raft
        .initialize(members.into_iter().collect::<BTreeMap<_, _>>())
        .await
    {
        Ok(()) => {}
        Err(RaftError::APIError(InitializeError::NotAllowed(e))) => {
            // A race with an init through another node: the details are Raft's log ids.
            tracing::debug!(error = %e, "init refused by Raft");
            return Err(already_initialized());
        }
        Err(e) => return Err(ApiError::internal(e)),
    }
    tracing::info!(nodes = body.value.nodes.len(), "cluster initialized");
    // Answer with the membership as applied, not the empty one from before the init entry.
    wait_metric(&app, "init", |m| {
        m.membership_config.membership().nodes().next().is_some()
    })
    .await?;
    let mut answer = membership(&app);
    if let Some(auth) = &body.value.auth {
        answer.auth = Some(enable_on_leader(&app, &auth.admin).await?);
    }
    Ok(Json(answer).into_response())
}

/// Whether this node holds a membership or any log entry: then it was initialized, or
/// joined a cluster that was.
fn initialized(app: &App) -> bool {
    let watch = app.raft.metrics();
    let metrics = watch.borrow();
    metrics.last_log_index.is_some()
        || metrics
            .membership_config
            .membership()
            .nodes()
            .next()
            .is_some()
}

fn already_initialized() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidTransition,
        "cluster already initialized: this node already holds a membership and a log",
    )
}

/// Turns auth on right after init, through whichever node won the first election (SPEC
/// §8: `POST /cluster/init` with `auth`). The admin's token comes back in init's answer.
async fn enable_on_leader(app: &App, admin: &str) -> Result<AuthEnabled> {
    let deadline = tokio::time::Instant::now() + AUTH_ENABLE_TIMEOUT;
    loop {
        wait_metric(app, "leader", |m| m.current_leader.is_some()).await?;
        let attempt = if app.is_leader() {
            endpoints::enable_here(app, admin).await
        } else {
            enable_through_leader(app, admin).await
        };
        match attempt {
            Err(e) if e.code == ErrorCode::NoLeader && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// `POST /v1/auth/enable` relayed to the leader, its answer decoded.
async fn enable_through_leader(app: &App, admin: &str) -> Result<AuthEnabled> {
    let body = serde_json::to_vec(&EnableAuthRequest {
        admin: admin.to_string(),
    })
    .map_err(ApiError::internal)?;
    let path = "/v1/auth/enable";
    let answer = forward::to_leader(
        app,
        &HeaderMap::new(),
        path,
        body.into(),
        Kind::Mutation,
        None,
    )
    .await?;
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), ENABLE_ANSWER_BYTES_MAX)
        .await
        .map_err(ApiError::internal)?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(ApiError::internal);
    }
    let body: ErrorBody = serde_json::from_slice(&bytes).map_err(ApiError::internal)?;
    Err(body.into())
}

/// The caller must hold `admin` (SPEC §8: membership and compaction are admin's), by
/// this node's applied grants.
fn require_admin(app: &App, headers: &HeaderMap) -> Result<()> {
    auth::caller(app, headers)?.require_admin()
}

pub async fn join(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<NodeSpec>,
) -> Result<Response> {
    let spec = &body.value;
    let info = node_info(spec, "")?;
    check_usable(&app, spec.id, &info, "")?;
    let addresses = MemberAddresses::of_new(spec.id, &info, "").await?;
    if !app.is_leader() {
        return forward::to_leader(
            &app,
            &headers,
            "/cluster/join",
            body.raw.clone(),
            Kind::Membership,
            None,
        )
        .await;
    }
    require_admin(&app, &headers)?;
    let _one_change = app.changing_membership.lock().await;
    // Learner first: it receives the log (or a snapshot) without counting toward quorum.
    let joined_at = match membership_of(&app, spec.id, &addresses).await? {
        Some(Member::Voter) => {
            confirm_leadership(&app).await?;
            admit::check_voter_admitted(&app, spec).await?;
            return Ok(Json(membership(&app)).into_response());
        }
        Some(Member::Learner { since }) => {
            wait_applied(&app, since, spec.id).await?;
            since
        }
        None => {
            check_presents_proof(&app, spec, false).await?;
            let added = app.raft.add_learner(spec.id, info, false);
            within_commit_timeout(
                &app,
                added,
                spec.id,
                &learner_addition(spec.id),
                TO_LEARN_JOIN,
            )
            .await?
            .map_err(membership_error)?
            .log_id
            .index
        }
    };
    wait_caught_up(&app, spec, joined_at).await?;
    check_presents_proof(&app, spec, true).await?;
    tracing::info!(id = spec.id, "learner caught up; promoting to voter");
    let voters = BTreeSet::from([spec.id]);
    commit_membership(
        &app,
        ChangeMembers::AddVoterIds(voters),
        spec.id,
        &format!("the promotion of node {} to voter", spec.id),
        TO_LEARN_JOIN,
    )
    .await?;
    Ok(Json(membership(&app)).into_response())
}

/// How a join's caller learns the fate of a change whose commit it did not see.
const TO_LEARN_JOIN: &str = "join again to learn it (a join of a member is idempotent)";

fn learner_addition(id: NodeId) -> String {
    format!("the addition of node {id} as a learner")
}

/// Proposes `change` (of node `id`) and waits until it is committed, at most
/// `batching.commit_timeout_ms` ([`within_commit_timeout`]).
async fn commit_membership(
    app: &App,
    change: ChangeMembers<NodeId, NodeInfo>,
    id: NodeId,
    what: &str,
    to_learn: &str,
) -> Result<()> {
    let proposed = app.raft.change_membership(change, false);
    within_commit_timeout(app, proposed, id, what, to_learn)
        .await?
        .map(drop)
        .map_err(membership_error)
}

/// `proposed`'s outcome if it comes within `batching.commit_timeout_ms`; past that, 504
/// `outcome_unknown` with `id`, since the change may still commit (a leader without a
/// majority of live voters never sees it commit, and would hold the caller forever).
/// `what` names the change in that answer, and `to_learn` says how to learn its fate.
async fn within_commit_timeout<T>(
    app: &App,
    proposed: impl std::future::Future<Output = T>,
    id: NodeId,
    what: &str,
    to_learn: &str,
) -> Result<T> {
    let commit_timeout = Duration::from_millis(app.config.batching.commit_timeout_ms);
    tokio::time::timeout(commit_timeout, proposed)
        .await
        .map_err(|_| {
            ApiError::new(
                ErrorCode::OutcomeUnknown,
                format!(
                    "outcome unknown: {what} was not committed within {} ms; {to_learn}",
                    commit_timeout.as_millis()
                ),
            )
            .with("id", id)
        })
}

/// Waits (at most `batching.commit_timeout_ms`) until this node applied the membership
/// entry at `index` that added learner `id`: a join retried after its learner's entry
/// failed to commit (no live majority) would otherwise wait out the catch-up timeout and
/// blame the learner.
async fn wait_applied(app: &App, index: u64, id: NodeId) -> Result<()> {
    let mut rx = app.raft.metrics();
    let applied = async {
        rx.wait_for(|m| m.last_applied.is_some_and(|log_id| log_id.index >= index))
            .await
            .is_ok()
    };
    let running =
        within_commit_timeout(app, applied, id, &learner_addition(id), TO_LEARN_JOIN).await?;
    match running {
        true => Ok(()),
        false => Err(ApiError::internal("raft stopped during the join")),
    }
}

/// What a joining node already is.
enum Member {
    /// A voter: the join has nothing left to do.
    Voter,
    /// A learner (a join that timed out, retried): promoted once it holds the log up to
    /// `since`, the membership entry in force.
    Learner { since: u64 },
}

/// What node `id` already is, if a member. A join of a member under other addresses
/// would answer as if it had happened while the membership keeps the old ones: 409,
/// naming them. Under the same addresses, however spelled, a join is idempotent. A join
/// under an address of another member, however spelled, is 409 too: one process would
/// answer for two ids.
async fn membership_of(
    app: &App,
    id: NodeId,
    joining: &MemberAddresses<'_>,
) -> Result<Option<Member>> {
    let config = app.raft.metrics().borrow().membership_config.clone();
    let others = config
        .membership()
        .nodes()
        .filter(|(other, _)| **other != id);
    for (other, known) in others {
        let Some(field) = joining.shared_with(&MemberAddresses::of_member(known).await) else {
            continue;
        };
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "{field} {} is an address of node {other}, a member: node {id} needs \
                 addresses of its own",
                joining.written(field)
            ),
        )
        .with("id", id)
        .with("field", field));
    }
    let Some(known) = config.membership().get_node(&id) else {
        return Ok(None);
    };
    if !joining.same_as(&MemberAddresses::of_member(known).await) {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "node {id} is already a member at client {} and peer {}: remove it first \
                 to give it other addresses, or join a new node under a new id",
                known.client_addr, known.peer_addr
            ),
        )
        .with("id", id));
    }
    if config.membership().voter_ids().any(|voter| voter == id) {
        return Ok(Some(Member::Voter));
    }
    let since = config.log_id().as_ref().map_or(0, |log_id| log_id.index);
    Ok(Some(Member::Learner { since }))
}

/// Waits until the leader has replicated to learner `spec.id` every entry up to `index`
/// (its own membership entry), so it is caught up before it counts toward quorum. Until
/// the learner answers its admission ([`admit::joining`]) it is asked again every
/// [`admit::RETRY_INTERVAL`]: it refuses the leader's entries until admitted.
///
/// openraft's own blocking `add_learner` judges "caught up" by a lag threshold of
/// entries, which a node that never answered meets while the log is shorter than the
/// threshold: a dead address would become a voter. Here only entries the learner
/// acknowledged count.
async fn wait_caught_up(app: &App, spec: &NodeSpec, index: u64) -> Result<()> {
    let id = spec.id;
    let timeout = Duration::from_millis(app.config.raft.join_catch_up_timeout_ms);
    let deadline = tokio::time::Instant::now() + timeout;
    let caught_up = |m: &RaftMetrics| {
        m.replication
            .as_ref()
            .and_then(|replication| replication.get(&id).cloned().flatten())
            .is_some_and(|matched| matched.index >= index)
    };
    let mut rx = app.raft.metrics();
    let mut admitted = false;
    loop {
        admitted = admitted || admit::joining(app, id, &spec.peer_addr).await;
        let until = if admitted {
            deadline
        } else {
            deadline.min(tokio::time::Instant::now() + admit::RETRY_INTERVAL)
        };
        match tokio::time::timeout_at(until, rx.wait_for(|m| caught_up(m))).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(_)) => return Err(ApiError::internal("raft stopped during the join")),
            Err(_) if tokio::time::Instant::now() < deadline => continue,
            Err(_) => break,
        }
    }
    Err(ApiError::new(
        ErrorCode::InvalidTransition,
        format!(
            "node {id} did not catch up within {} ms: it stays a learner (not counted \
             toward quorum); start it and join again, or remove it",
            timeout.as_millis()
        ),
    )
    .with("id", id))
}

pub async fn remove(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<RemoveRequest>,
) -> Result<Response> {
    let id = body.value.id;
    if !app.is_leader() {
        return forward::to_leader(
            &app,
            &headers,
            "/cluster/remove",
            body.raw.clone(),
            Kind::Membership,
            None,
        )
        .await;
    }
    require_admin(&app, &headers)?;
    let _one_change = app.changing_membership.lock().await;
    check_quorum_after_removal(&app, id).await?;
    let what = format!("the removal of node {id}");
    let to_learn = "remove again to learn it (the removal of a node that is no member is 404)";
    let change = ChangeMembers::RemoveVoters(BTreeSet::from([id]));
    commit_membership(&app, change, id, &what, to_learn).await?;
    // A learner with this id (never a voter) is dropped too.
    let metrics = app.raft.metrics().borrow().clone();
    if metrics
        .membership_config
        .membership()
        .get_node(&id)
        .is_some()
    {
        let change = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        commit_membership(&app, change, id, &what, to_learn).await?;
    }
    tracing::info!(id, "node removed");
    Ok(Json(membership(&app)).into_response())
}

/// Confirms that this node still leads (a ReadIndex round, as for a linearizable read)
/// before an answer that says a change is already done or needs none: a removal's 404, a
/// join's "already a voter". A leader deposed without knowing it yet (paused, cut off)
/// holds an old membership: it would answer 404 to the removal of a node joined since, and
/// a caller taking that as "removed" would stop a voter the cluster still counts. Refusals
/// (409) and the changes themselves need no such round: a refusal changes nothing, and a
/// deposed leader cannot commit a change.
async fn confirm_leadership(app: &App) -> Result<()> {
    app.reads.linearizable().await.map(drop).map_err(|e| {
        let why = ApiError::from(e).message;
        ApiError::no_leader(
            format!("this node could not confirm that it still leads: {why}"),
            None,
        )
    })
}

/// Refuses a removal that would leave the remaining voters without a live majority, or
/// whose change could not commit. openraft changes membership by joint consensus: the
/// joint configuration commits only with a majority of the current voters *and* of the
/// remaining ones, so a dead voter removed from two (one of the two live) would hang the
/// change forever, half-made, and block every later one.
async fn check_quorum_after_removal(app: &App, id: NodeId) -> Result<()> {
    let metrics = app.raft.metrics().borrow().clone();
    let voters: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
    let is_voter = voters.contains(&id);
    let is_member = metrics
        .membership_config
        .membership()
        .get_node(&id)
        .is_some();
    if !is_member {
        confirm_leadership(app).await?;
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("node {id} is not a member"),
        ));
    }
    if !is_voter {
        return Ok(());
    }
    if voters.len() == 1 {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            "refusing to remove the last voter",
        ));
    }
    let settle_by = tokio::time::Instant::now() + removal_settle_window(app);
    loop {
        let metrics = app.raft.metrics().borrow().clone();
        let voters: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let live = live_voters(app, &metrics, &voters).await;
        let verdict = quorum_after_removal(id, &voters, &live);
        if verdict.is_ok() || tokio::time::Instant::now() >= settle_by {
            return verdict;
        }
        tokio::time::sleep(LIVE_RECHECK_INTERVAL).await;
    }
}

/// How long a removal that finds too few live voters keeps looking before it refuses. A
/// leader elected moments ago has no replication answer yet from followers that are in
/// fact live, and a voter promoted moments ago may not have acknowledged an entry yet: both
/// show up within a few heartbeats, and an election timeout covers them with room to spare.
fn removal_settle_window(app: &App) -> Duration {
    Duration::from_millis(app.config.raft.election_timeout_max_ms)
}

/// The removal's verdict on the voters found live: refused when the remaining voters, or
/// the current ones (joint consensus needs both), would have no live majority.
fn quorum_after_removal(
    id: NodeId,
    voters: &BTreeSet<NodeId>,
    live: &BTreeSet<NodeId>,
) -> Result<()> {
    let remaining: Vec<NodeId> = voters.iter().copied().filter(|v| *v != id).collect();
    let live_remaining = remaining.iter().filter(|v| live.contains(v)).count();
    if live_remaining * 2 <= remaining.len() {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "refusing to remove node {id}: {live_remaining} live of the {} remaining \
                 voters, no quorum",
                remaining.len()
            ),
        )
        .with("live_voters", live_remaining)
        .with("remaining_voters", json!(remaining)));
    }
    if live.len() * 2 <= voters.len() {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "refusing to remove node {id}: {} live of the {} current voters, and a \
                 membership change must be committed by a majority of the current voters as \
                 well as of the remaining ones; bring a voter back first",
                live.len(),
                voters.len()
            ),
        )
        .with("live_voters", live.len())
        .with("current_voters", json!(voters)));
    }
    Ok(())
}

/// Which of `voters` are live: this node, and every other one whose replicated log is at
/// most [`LIVE_LAG_ENTRIES_MAX`] behind and that answers `/healthz` within
/// [`LIVE_PROBE_TIMEOUT`] (probed at once, in parallel).
async fn live_voters(
    app: &App,
    metrics: &RaftMetrics,
    voters: &BTreeSet<NodeId>,
) -> BTreeSet<NodeId> {
    let last = metrics.last_log_index.unwrap_or(0);
    let replication = &metrics.replication.clone().unwrap_or_default();
    let membership = metrics.membership_config.membership();
    let probes = voters.iter().map(|v| async move {
        if *v == app.node_id {
            return Some(*v);
        }
        let caught_up = replication
            .get(v)
            .and_then(|m| m.as_ref())
            .is_some_and(|m| last.saturating_sub(m.index) <= LIVE_LAG_ENTRIES_MAX);
        let live = match membership.get_node(v) {
            Some(node) if caught_up => answers_health_probe(app, node).await,
            _ => false,
        };
        live.then_some(*v)
    });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn answers_health_probe(app: &App, node: &NodeInfo) -> bool {
    let url = format!(
        "{}://{}/healthz",
        app.config.client_scheme(),
        node.client_addr
    );
    let answer = app
        .forwarder
        .get(url)
        .timeout(LIVE_PROBE_TIMEOUT)
        .send()
        .await;
    answer.is_ok_and(|r| r.status().is_success())
}

fn membership_error(e: RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>) -> ApiError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => ApiError::no_leader(
            "leadership changed during the membership change",
            f.leader_id,
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(in_progress),
        )) => ApiError::new(
            ErrorCode::InvalidTransition,
            "membership change refused: the previous one is not committed yet; retry once it is",
        )
        .with(
            "uncommitted_index",
            json!(in_progress.membership_log_id.map(|id| id.index)),
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => ApiError::new(
            ErrorCode::InvalidTransition,
            format!("membership change refused: {e}"),
        ),
        other => ApiError::outcome_unknown(other, None),
    }
}

fn membership(app: &App) -> MembershipResponse {
    let metrics = app.raft.metrics().borrow().clone();
    let m = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = m.voter_ids().collect();
    let learners: Vec<NodeId> = m.learner_ids().collect();
    let nodes = m
        .nodes()
        .map(|(id, n)| NodeSpec {
            id: *id,
            client_addr: n.client_addr.clone(),
            peer_addr: n.peer_addr.clone(),
        })
        .collect();
    MembershipResponse {
        voters: voters.into_iter().collect(),
        learners,
        nodes,
        auth: None,
    }
}

/// `GET /cluster/status`: with auth on, for any principal (this node's applied state
/// authenticates: a token it does not know yet is 401 here).
pub async fn status(
    State(app): State<SharedApp>,
    headers: HeaderMap,
) -> Result<Json<ClusterStatus>> {
    auth::caller(&app, &headers)?;
    Ok(Json(status_of(&app)?))
}

fn status_of(app: &App) -> Result<ClusterStatus> {
    let metrics = app.raft.metrics().borrow().clone();
    let members = membership(app);
    let applied_index = metrics.last_applied.map(|id| id.index).unwrap_or(0);
    Ok(ClusterStatus {
        node_id: app.node_id,
        role: role_name(metrics.state).to_string(),
        leader_id: crate::consensus::known_leader(&metrics),
        term: metrics.current_term,
        last_log_index: metrics.last_log_index.unwrap_or(0),
        commit_index: app.commit_index().max(applied_index),
        applied_index,
        ms_since_leader_contact: app.ms_since_leader_contact(),
        voters: members.voters,
        learners: members.learners,
        nodes: members.nodes,
        snapshot_index: metrics.snapshot.map(|id| id.index).unwrap_or(0),
        log_purged_through: metrics.purged.map(|id| id.index).unwrap_or(0),
    })
}

/// Snapshot, purge the log through it, then compact RocksDB and drop obsolete WAL files:
/// afterwards a forgotten value's bytes are in no file of this node. With auth on, the
/// caller's `admin` is checked once this node caught up with the leader
/// ([`auth::catch_up`]), so a rotated or deleted admin token compacts no node.
pub async fn compact(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    _: NoFields,
) -> Result<Json<CompactResponse>> {
    auth::catch_up(&app).await?;
    require_admin(&app, &headers)?;
    let _one_at_a_time = app.compacting.lock().await;
    let applied = app.reads.applied_index();
    let snapshot_index = snapshot_covering(&app, applied).await?;
    app.raft
        .trigger()
        .purge_log(snapshot_index)
        .await
        .map_err(ApiError::internal)?;
    wait_metric(&app, "purge", |m| {
        m.purged.map(|id| id.index).unwrap_or(0) >= snapshot_index
    })
    .await?;
    app.view.compact_files().await?;
    let log_purged_through = app.view.log_purged_through()?;
    tracing::info!(snapshot_index, log_purged_through, "compacted");
    Ok(Json(CompactResponse {
        snapshot_index,
        log_purged_through,
    }))
}

type RaftMetrics = openraft::RaftMetrics<NodeId, NodeInfo>;

/// Asks for snapshots until one covers `applied`, within [`COMPACT_STEP_TIMEOUT`]; returns
/// its index.
///
/// - openraft builds one snapshot at a time and drops a request that arrives during a
///   build (one its entry-count policy or the log-bytes trigger started), and that build
///   may end below `applied`; so the request is repeated every [`SNAPSHOT_ASK_INTERVAL`]
///   until a snapshot covers `applied` (a repeat during a build is dropped again, which
///   is harmless). A single request made `/cluster/compact` fail after 60 s under load
///   (a 5-node chaos campaign, seed 1206).
async fn snapshot_covering(app: &App, applied: u64) -> Result<u64> {
    let covers = |m: &RaftMetrics| m.snapshot.map_or(0, |id| id.index) >= applied;
    let deadline = tokio::time::Instant::now() + COMPACT_STEP_TIMEOUT;
    let mut rx = app.raft.metrics();
    loop {
        app.raft
            .trigger()
            .snapshot()
            .await
            .map_err(ApiError::internal)?;
        let next_ask = (tokio::time::Instant::now() + SNAPSHOT_ASK_INTERVAL).min(deadline);
        match tokio::time::timeout_at(next_ask, rx.wait_for(|m| covers(m))).await {
            Ok(Ok(m)) => return Ok(m.snapshot.map_or(0, |id| id.index)),
            Ok(Err(_)) => return Err(ApiError::internal("Raft stopped during the snapshot")),
            Err(_) if next_ask < deadline => continue,
            Err(_) => return Err(step_timed_out("snapshot")),
        }
    }
}

fn step_timed_out(what: &str) -> ApiError {
    ApiError::internal(format!(
        "{what} did not complete within {} s",
        COMPACT_STEP_TIMEOUT.as_secs()
    ))
}

async fn wait_metric(
    app: &App,
    what: &str,
    done: impl Fn(&RaftMetrics) -> bool,
) -> Result<RaftMetrics> {
    let mut rx = app.raft.metrics();
    let waited = tokio::time::timeout(COMPACT_STEP_TIMEOUT, rx.wait_for(|m| done(m))).await;
    match waited {
        Ok(Ok(m)) => Ok(m.clone()),
        _ => Err(step_timed_out(what)),
    }
}

/// A joining node is the node the join names, presents the peer proof the members
/// require, and accepts theirs. Refused with 409 `invalid_transition` and `id` when not:
/// - Whatever the proof, a node refuses a peer request meant for another id: a join under
///   a wrong id (or another node's address) would add a learner that never catches up.
/// - On a cluster whose peers prove themselves with a secret, a node started without it
///   admits anyone on its peer port ([`PeerProof::None`]) and sends no secret either. It
///   would still receive the log, but the members refuse its own requests, so as a voter
///   it could never win an election, and with one more node down no majority could elect
///   a leader.
/// - On a cluster with peer TLS, a node whose certificate this node's CA does not verify
///   or that names another node id, that does not trust this node's certificate, or whose
///   peer port does not speak TLS, could never take the log at all.
///
/// The invariants:
/// - Asked before the node is added (`learner: false`), so a refusal changes nothing, and
///   again once it caught up, before its promotion (`learner: true`; it stays a learner),
///   since a node may be started only after its join was sent.
/// - A node that refuses this node's own proof (another secret, another CA, or another
///   node at that address) would refuse the leader's entries as well: refused at once,
///   rather than after `raft.join_catch_up_timeout_ms` of waiting for a catch-up that
///   cannot come.
/// - Only a definite answer refuses. A question that fails otherwise is no answer: the
///   join goes on (a node not running yet then fails to catch up, and one that caught up
///   is reachable, so that failure is logged as a warning).
async fn check_presents_proof(app: &App, spec: &NodeSpec, learner: bool) -> Result<()> {
    let proof = app.config.peer_proof();
    let timeout = Duration::from_millis(app.config.raft.rpc_timeout_ms);
    let (other_proof, fix) = match proof {
        PeerProof::Tls => (
            "another CA",
            "restart it with a peer certificate of the cluster CA for its id (and that CA as \
             --peer-tls-ca)",
        ),
        PeerProof::Secret => ("another secret", "restart it with --peer-secret-file"),
        PeerProof::None => (
            "a peer proof this cluster does not use",
            "start it as the members are, at the addresses the join names",
        ),
    };
    let outcome = if learner {
        format!("it stays a learner ({fix} and join again, or remove it)")
    } else {
        format!("nothing changed ({fix} and join again)")
    };
    let id = spec.id;
    let refusal =
        |message: String| Err(ApiError::new(ErrorCode::InvalidTransition, message).with("id", id));
    match app.peers.proof_mode(id, &spec.peer_addr, timeout).await {
        Ok(ProofAnswer::Mode(PeerProof::None)) if proof == PeerProof::Secret => refusal(format!(
            "node {id} was started without the peer secret: the members would refuse its \
             requests, so it could never lead; {outcome}"
        )),
        Ok(ProofAnswer::RefusedUs(why)) => refusal(format!(
            "node {id} at {} refuses this node's peer requests ({why}): another node answers \
             at that address, or it was started with {other_proof}; {outcome}",
            spec.peer_addr
        )),
        Ok(ProofAnswer::TlsFailed(why)) => refusal(format!(
            "TLS with node {id} at {} fails ({why}): its peer certificate must be signed by \
             the cluster CA and name node {id}, and it must trust the cluster CA; {outcome}",
            spec.peer_addr
        )),
        Ok(ProofAnswer::Mode(_)) => Ok(()),
        Err(err) if learner => {
            tracing::warn!(id, error = %err, "could not ask a joining node for its peer proof");
            Ok(())
        }
        Err(err) => {
            tracing::debug!(id, error = %err, "a joining node did not answer for its peer proof yet");
            Ok(())
        }
    }
}

/// `GET /healthz` (SPEC §6 extension: `{ok, node_id, role}`, [`Health`]): 200 while the
/// node serves its ports and Raft runs; 503 once Raft has stopped (e.g. on a storage
/// error), so supervisors restart it instead of routing to it.
pub async fn healthz(State(app): State<SharedApp>) -> Response {
    let running = app.raft.metrics().borrow().running_state.is_ok();
    let body = Json(Health {
        ok: running,
        node_id: app.node_id,
        role: app.role().to_string(),
    });
    let status = if running {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

/// `GET /metrics`: the request counters, then Raft's, the store's, the read gate's and the
/// memory gauges, in Prometheus text format.
pub async fn metrics(State(app): State<SharedApp>) -> Response {
    let mut out = String::new();
    app.metrics.render(&mut out);
    raft_gauges(&app, &mut out);
    store_gauges(&app, &mut out);
    read_gauges(&app, &mut out);
    memory_gauges(&app, &mut out);
    connection_gauges(&app, &mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// What clients hold open against their limits (`limits.connections_max`,
/// `limits.watchers_max`).
fn connection_gauges(app: &App, out: &mut String) {
    gauge(
        out,
        "cairn_client_connections_open",
        "open client-port connections",
        app.connections.open() as u64,
    );
    gauge(
        out,
        "cairn_client_connections_max",
        "limits.connections_max",
        app.connections.max() as u64,
    );
    let watchers_max = app.config.limits.watchers_max;
    gauge(
        out,
        "cairn_watchers_open",
        "open GET /v1/watch streams",
        (watchers_max - app.watchers.available_permits()) as u64,
    );
}

/// Leadership, term and the log positions.
fn raft_gauges(app: &App, out: &mut String) {
    let metrics = app.raft.metrics().borrow().clone();
    let is_leader = (metrics.state == ServerState::Leader) as u64;
    gauge(out, "cairn_is_leader", "1 on the leader", is_leader);
    gauge(out, "cairn_term", "current Raft term", metrics.current_term);
    gauge(
        out,
        "cairn_last_log_index",
        "last index in the local log",
        metrics.last_log_index.unwrap_or(0),
    );
    gauge(
        out,
        "cairn_commit_index",
        "last committed index known",
        app.commit_index(),
    );
    gauge(
        out,
        "cairn_applied_index",
        "last applied index",
        app.reads.applied_index(),
    );
    gauge(
        out,
        "cairn_snapshot_index",
        "last log index in the snapshot",
        metrics.snapshot.map(|i| i.index).unwrap_or(0),
    );
    gauge(
        out,
        "cairn_log_purged_through",
        "last purged log index",
        metrics.purged.map(|i| i.index).unwrap_or(0),
    );
}

/// What a crash would re-apply, the log's files, and the apply path's slot cache.
fn store_gauges(app: &App, out: &mut String) {
    // A value that cannot be read is left out, not reported as 0 ("nothing to re-apply").
    match app.view.unflushed_state_records() {
        Ok(records) => gauge(
            out,
            "cairn_state_unflushed_records",
            "state-machine records not yet flushed (a crash re-applies them from the log)",
            records,
        ),
        Err(e) => tracing::warn!(error = %e, "cairn_state_unflushed_records left out"),
    }
    let (segments, segment_bytes) = app.view.log_footprint();
    gauge(
        out,
        "cairn_log_segments",
        "Raft log segment files",
        segments,
    );
    gauge(
        out,
        "cairn_log_segment_bytes",
        "live bytes in the Raft log's segment files",
        segment_bytes,
    );
    counter(
        out,
        "cairn_raft_payloads_cut_total",
        "append-entries payloads cut short by raft.max_payload_bytes",
        app.view.log_payloads_cut(),
    );
    counter(
        out,
        "cairn_snapshots_by_log_bytes_total",
        "snapshots requested because the log grew by raft.snapshot_log_bytes",
        app.snapshot_trigger.fired(),
    );
    match app.view.blob_gc() {
        Ok((space, collecting)) => {
            gauge(
                out,
                "cairn_blob_file_bytes",
                "bytes of the state machine's blob files (large values), garbage included",
                space.file_bytes,
            );
            gauge(
                out,
                "cairn_blob_garbage_bytes",
                "bytes of overwritten or deleted values still in blob files",
                space.garbage_bytes,
            );
            gauge(
                out,
                "cairn_blob_gc_collecting",
                "1 while compactions move live values out of the oldest blob files",
                u64::from(collecting),
            );
        }
        Err(e) => tracing::warn!(error = %e, "cairn_blob_* gauges left out"),
    }
    let cache = app.view.slot_cache_stats();
    counter(
        out,
        "cairn_slot_cache_hits_total",
        "slot lookups by applied mutations answered from the slot cache",
        cache.hits,
    );
    counter(
        out,
        "cairn_slot_cache_misses_total",
        "slot lookups by applied mutations that went to RocksDB",
        cache.misses,
    );
    gauge(
        out,
        "cairn_slot_cache_bytes",
        "bytes held by the slot cache",
        cache.bytes as u64,
    );
}

/// Where the node's memory is: the process's resident set and RocksDB's parts of it (the
/// slot cache is in [`store_gauges`]). A value that cannot be read is left out.
fn memory_gauges(app: &App, out: &mut String) {
    match resident_bytes() {
        Some(bytes) => gauge(
            out,
            "cairn_process_resident_bytes",
            "resident set size of the node process",
            bytes,
        ),
        None => {
            tracing::warn!("cairn_process_resident_bytes left out: /proc/self/status unreadable")
        }
    }
    let memory = match app.view.engine_memory() {
        Ok(memory) => memory,
        Err(e) => return tracing::warn!(error = %e, "RocksDB memory gauges left out"),
    };
    let parts = [
        (
            "cairn_rocksdb_memtable_bytes",
            "RocksDB memtables, flushed or not",
            memory.memtables,
        ),
        (
            "cairn_rocksdb_table_readers_bytes",
            "RocksDB index and filter blocks held outside the block cache",
            memory.table_readers,
        ),
        (
            "cairn_rocksdb_block_cache_bytes",
            "RocksDB block cache usage",
            memory.block_cache,
        ),
    ];
    for (name, help, value) in parts {
        gauge(out, name, help, value);
    }
}

/// `VmRSS` of `/proc/self/status` (Linux), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The read gate: token age and ReadIndex rounds.
fn read_gauges(app: &App, out: &mut String) {
    gauge(
        out,
        "cairn_read_token_age_ms",
        "age of the newest read token",
        app.reads.token_age_ms().unwrap_or(0),
    );
    counter(
        out,
        "cairn_read_index_rounds_total",
        "ReadIndex rounds run by the read gate (each confirms leadership for the linearizable reads queued before it)",
        app.reads.rounds.load(std::sync::atomic::Ordering::Relaxed),
    );
    counter(
        out,
        "cairn_read_confirm_retries_total",
        "leadership confirmations asked again within a ReadIndex round after a majority did not answer in time",
        app.reads.confirm_retries.load(std::sync::atomic::Ordering::Relaxed),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[NodeId]) -> BTreeSet<NodeId> {
        list.iter().copied().collect()
    }

    #[test]
    fn a_removal_needs_a_live_majority_of_the_remaining_voters() {
        let voters = ids(&[2, 3, 4, 5]);
        let refused = quorum_after_removal(3, &voters, &ids(&[3, 4])).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidTransition);
        assert!(
            refused.message.contains("1 live of the 3 remaining voters"),
            "{}",
            refused.message
        );
        assert!(quorum_after_removal(3, &voters, &ids(&[3, 4, 5])).is_ok());
        // Node 2 frozen: the remaining live majority is not enough if the current voters
        // would have none.
        assert!(quorum_after_removal(3, &voters, &ids(&[4, 5])).is_err());
    }

    #[test]
    fn a_removal_needs_a_live_majority_of_the_current_voters_too() {
        // The dead one of two voters: the remaining voter is live, but the joint
        // configuration could never commit without the dead one.
        let refused = quorum_after_removal(2, &ids(&[1, 2]), &ids(&[1])).unwrap_err();
        assert!(
            refused.message.contains("1 live of the 2 current voters"),
            "{}",
            refused.message
        );
        assert!(quorum_after_removal(2, &ids(&[1, 2]), &ids(&[1, 2])).is_ok());
    }
}
