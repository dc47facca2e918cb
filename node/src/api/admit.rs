//! Admitting the nodes that init and join add ([`crate::raft_rpc::admission`]): a node
//! whose data dir holds no Raft state answers Raft only once admitted, so that a voter
//! whose data was lost cannot come back under its old id unnoticed.
//!
//! - **Init** claims this node and then every other listed node, from term 0 (a new
//!   cluster has no history to lose); a node another init claimed first refuses the init
//!   ([`first_members`]). A node that does not answer is asked again, from
//!   [`RETRY_INTERVAL`] backing off to [`RETRY_INTERVAL_MAX`], until it does, while this
//!   process runs: the members may be started after the init.
//! - **Join** admits the joining node from the leader's current term, while it waits for
//!   the node to catch up (a node may be started after its join was sent).
//! - A join of a node that is already a **voter** asks whether it is admitted: a voter
//!   that is not has lost its data, and the join says so instead of answering as if
//!   nothing were wrong.

use std::time::Duration;

use cairn_api::{ErrorCode, NodeSpec};

use super::error::ApiError;
use super::{App, SharedApp};
use crate::consensus::{NodeId, NodeInfo};
use crate::raft_rpc::admission::{AdmissionState, AdmitRequest, Floor};

/// How soon an unanswered admission is asked again.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(500);
/// The longest wait between two askings of a first member that has not answered.
const RETRY_INTERVAL_MAX: Duration = Duration::from_secs(10);

fn rpc_timeout(app: &App) -> Duration {
    Duration::from_millis(app.config.raft.rpc_timeout_ms)
}

/// Claims this node, then the other first members of a cluster this node initializes,
/// each for this init ([`AdmitRequest::Claim`]). Those that do not answer are admitted in
/// the background as soon as they do.
///
/// - A node admitted by another first (this one included) was taken by another init sent
///   at the same time, or belongs to another cluster: 409 `invalid_transition` with its
///   id, and nothing is initialized. Two inits racing through two nodes that name each
///   other therefore cannot both go on to make two clusters (and a node of one would meet
///   the other's leader in a term it led, where openraft stops on an assertion).
/// - Fails too if this node's own admission cannot be written.
pub async fn first_members(
    app: &SharedApp,
    members: &[(NodeId, NodeInfo)],
) -> Result<(), ApiError> {
    let floor = Floor {
        term: 0,
        leader: app.node_id,
    };
    let own = app.admission.claim(floor).map_err(ApiError::internal)?;
    if own != floor {
        return Err(claimed_by_another(app.node_id, own));
    }
    let others = members.iter().filter(|(id, _)| *id != app.node_id);
    let asked = others.map(|(id, info)| async move {
        let answer = claim(app, *id, &info.peer_addr, floor).await;
        (*id, info.peer_addr.clone(), answer)
    });
    let mut unanswered = Vec::new();
    for (id, peer_addr, answer) in futures::future::join_all(asked).await {
        match answer {
            Some(held) if held == floor => {}
            Some(held) => return Err(claimed_by_another(id, held)),
            None => unanswered.push((id, peer_addr)),
        }
    }
    for (id, peer_addr) in unanswered {
        tracing::info!(
            id,
            %peer_addr,
            "a first member did not answer its admission yet; asking again until it does"
        );
        tokio::spawn(keep_admitting(app.clone(), id, peer_addr, floor));
    }
    Ok(())
}

/// Asks node `id` to take `floor` as its admission, backing off from [`RETRY_INTERVAL`]
/// to [`RETRY_INTERVAL_MAX`], until it answers or this node shuts down.
async fn keep_admitting(app: SharedApp, id: NodeId, peer_addr: String, floor: Floor) {
    let mut shutdown = app.shutdown.clone();
    let mut interval = RETRY_INTERVAL;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        if admit(&app, id, &peer_addr, floor).await {
            tracing::info!(id, "admitted a first member that started after the init");
            return;
        }
        interval = (interval * 2).min(RETRY_INTERVAL_MAX);
    }
}

/// The refusal of an init one of whose first members (`id`) holds another admission.
fn claimed_by_another(id: NodeId, held: Floor) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidTransition,
        format!(
            "node {id} was already admitted by node {leader} (term {}): another init, sent \
             at the same time, or another cluster took it first; nothing was initialized. \
             Send init once, through one node (an init through node {leader} can still take \
             it); a node that holds no Raft state yet can also be started afresh on an empty \
             data dir",
            held.term,
            leader = held.leader,
        ),
    )
    .with("id", id)
}

/// The floor node `id` holds after this init's claim, `None` if it did not answer.
async fn claim(app: &App, id: NodeId, peer_addr: &str, floor: Floor) -> Option<Floor> {
    let asked = app
        .peers
        .admit(id, peer_addr, AdmitRequest::Claim(floor), rpc_timeout(app))
        .await;
    match asked {
        Ok(AdmissionState::AdmittedBy(held)) => Some(held),
        Ok(other) => {
            tracing::debug!(id, ?other, "a claim answered without a floor");
            None
        }
        Err(error) => {
            tracing::debug!(id, %error, "claim not answered");
            None
        }
    }
}

/// Admits joining node `id` from the leader's current term (this node leads: only the
/// leader runs a join). Whether it answered.
pub async fn joining(app: &App, id: NodeId, peer_addr: &str) -> bool {
    let term = app.raft.metrics().borrow().current_term;
    let floor = Floor {
        term,
        leader: app.node_id,
    };
    admit(app, id, peer_addr, floor).await
}

/// Asks node `id` to take `floor` as its admission. Whether it answered that it is
/// admitted (a node admitted before keeps its first admission).
async fn admit(app: &App, id: NodeId, peer_addr: &str, floor: Floor) -> bool {
    let asked = app
        .peers
        .admit(id, peer_addr, AdmitRequest::Admit(floor), rpc_timeout(app))
        .await;
    match asked {
        Ok(AdmissionState::Admitted | AdmissionState::AdmittedBy(_)) => {
            tracing::debug!(id, term = floor.term, "node admitted");
            true
        }
        Ok(AdmissionState::NotAdmitted) => false,
        Err(error) => {
            tracing::debug!(id, %error, "admission not answered");
            false
        }
    }
}

/// Refuses the join of a voter that answers that it is not admitted: its data dir holds
/// no Raft state, so it lost what it held as a voter. 409 `invalid_transition` with `id`.
/// A voter that does not answer is no proof of anything: the join answers as before.
pub async fn check_voter_admitted(app: &App, spec: &NodeSpec) -> Result<(), ApiError> {
    let asked = app
        .peers
        .admit(
            spec.id,
            &spec.peer_addr,
            AdmitRequest::Ask,
            rpc_timeout(app),
        )
        .await;
    if asked != Ok(AdmissionState::NotAdmitted) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::InvalidTransition,
        format!(
            "node {id} is a voter, but its data dir holds no Raft state: it lost what it \
             held as a voter (a wipe or a new disk), and is refused until it is removed and \
             joined again (`cairn cluster remove --id {id}`, then this join); nothing changed",
            id = spec.id
        ),
    )
    .with("id", spec.id))
}
