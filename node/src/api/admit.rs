//! Admitting the nodes that init and join add ([`crate::raft_rpc::admission`]): a node
//! whose data dir holds no Raft state answers Raft only once admitted, so that a voter
//! whose data was lost cannot come back under its old id unnoticed.
//!
//! - **Init** admits this node and then every other listed node, from term 0 (a new
//!   cluster has no history to lose). A node that does not answer is asked again, from
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

/// Admits this node, then the other first members of a cluster this node initializes.
/// Those that do not answer are admitted in the background as soon as they do. Fails
/// only if this node's own admission cannot be written (then nothing was initialized).
pub async fn first_members(
    app: &SharedApp,
    members: &[(NodeId, NodeInfo)],
) -> Result<(), ApiError> {
    let floor = Floor {
        term: 0,
        leader: app.node_id,
    };
    app.admission.admit(floor).map_err(ApiError::internal)?;
    let others = members.iter().filter(|(id, _)| *id != app.node_id);
    let asked = others.map(|(id, info)| async move {
        let answered = admit(app, *id, &info.peer_addr, floor).await;
        (!answered).then(|| (*id, info.peer_addr.clone()))
    });
    let unanswered: Vec<(NodeId, String)> = futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect();
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
        Ok(AdmissionState::Admitted) => {
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
