//! Vouching: a node that this node's membership does not list yet, confirmed as a member by
//! a node that it does list.
//!
//! With mutual TLS a node answers only the voters and learners of the membership it knows
//! ([`super::proof`]). A node that missed a membership change (stopped or cut off while
//! another node joined) knows an older one, and refuses the new node as a candidate and as
//! a leader: it stays a lost replica until a leader it knows is elected, and, when the new
//! nodes make up the rest of a majority, the cluster cannot elect at all. The new node's
//! own word cannot settle it: any holder of a certificate from the cluster CA could claim
//! a membership. A member this node knows can: Raft already trusts it with the log.
//!
//! So a refusal of an unlisted id asks, in the background, every other member this node
//! knows whether its membership lists that id ([`super::MEMBER_PATH`]); the first that
//! does vouches for it for [`VOUCH_TTL`], and the caller's next request passes (openraft
//! retries a refused peer within a second). Once this node has caught up, its own
//! membership lists the new node and the vouch no longer matters.
//!
//! - The request path never waits on a lookup: it reads the cache. A miss starts at most
//!   one lookup per id at a time, and none within [`UNVOUCHED_COOLDOWN`] of a lookup that
//!   found no voucher, so a holder of a valid certificate for an id that is no member
//!   makes this node ask at most one round of questions per cooldown.
//! - Only a member this node knows can vouch: the question goes to the address this
//!   node's membership gives it, over a connection whose certificate names that member.
//! - A vouch expires: a node removed since it was vouched for is refused again after
//!   [`VOUCH_TTL`], once no member lists it.
//! - When every member this node knows is gone (all removed and stopped while it was
//!   away), nobody can vouch: the operator removes the node, wipes its data dir (the old
//!   membership in it is what it trusts) and joins it again (docs/operations.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};

use super::network::PeerClient;
use crate::consensus::{NodeId, Raft};
use crate::metrics::Metrics;

/// How long a vouch lets an unlisted node in before members are asked again.
pub const VOUCH_TTL: Duration = Duration::from_secs(10);
/// After a lookup that found no voucher, how long before the same id is asked about again.
pub const UNVOUCHED_COOLDOWN: Duration = Duration::from_secs(1);
/// Bound on each member's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// Ids remembered at most: past it, expired standings are dropped, and while none has
/// expired no new lookup starts. Only an id whose certificate the cluster CA signed gets
/// this far, so this is far above any real cluster.
const STANDINGS_MAX: usize = 1024;

/// What is known about one unlisted id.
#[derive(Clone, Copy)]
enum Standing {
    /// A lookup is under way.
    Asking,
    /// A member listed it at this time.
    Vouched(Instant),
    /// No member listed it in the lookup that ended at this time.
    Unvouched(Instant),
}

impl Standing {
    fn expired(&self, now: Instant) -> bool {
        match self {
            Standing::Asking => false,
            Standing::Vouched(at) => now.duration_since(*at) >= VOUCH_TTL,
            Standing::Unvouched(at) => now.duration_since(*at) >= UNVOUCHED_COOLDOWN,
        }
    }
}

/// The vouches of one node: a cache in front of lookups to its members.
#[derive(Clone)]
pub struct Vouches {
    raft: Raft,
    peers: PeerClient,
    metrics: Arc<Metrics>,
    standings: Arc<Mutex<HashMap<NodeId, Standing>>>,
}

impl Vouches {
    pub fn new(raft: Raft, peers: PeerClient, metrics: Arc<Metrics>) -> Vouches {
        Vouches {
            raft,
            peers,
            metrics,
            standings: Arc::default(),
        }
    }

    /// Whether a member vouched for `id` within [`VOUCH_TTL`]. Otherwise starts a lookup
    /// unless one is under way or the last one, within [`UNVOUCHED_COOLDOWN`], found no
    /// voucher; the answer is `false` either way, and the caller's next request sees the
    /// lookup's result.
    pub fn vouched(&self, id: NodeId) -> bool {
        let now = Instant::now();
        let mut standings = self.standings.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(standing) = standings.get(&id).filter(|s| !s.expired(now)) {
            return matches!(standing, Standing::Vouched(_));
        }
        if standings.len() >= STANDINGS_MAX {
            standings.retain(|_, standing| !standing.expired(now));
            if standings.len() >= STANDINGS_MAX {
                return false;
            }
        }
        standings.insert(id, Standing::Asking);
        drop(standings);
        let vouches = self.clone();
        tokio::spawn(async move { vouches.look_up(id).await });
        false
    }

    /// Asks every other member this node knows, at once, whether it lists `id`; records
    /// the first that does, or that none did.
    async fn look_up(&self, id: NodeId) {
        let members: Vec<(NodeId, String)> = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            let own_id = metrics.id;
            let membership = metrics.membership_config.membership();
            let members = membership
                .nodes()
                .filter(|(member, _)| **member != own_id && **member != id)
                .map(|(member, node)| (*member, node.peer_addr.clone()))
                .collect();
            members
        };
        let mut answers: FuturesUnordered<_> = members
            .iter()
            .map(|(member, peer_addr)| async move {
                let listed = self.peers.lists_member(*member, peer_addr, id, ASK_TIMEOUT);
                (*member, listed.await)
            })
            .collect();
        let mut voucher = None;
        while let Some((member, answer)) = answers.next().await {
            match answer {
                Ok(true) => {
                    voucher = Some(member);
                    break;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(member, error = %e, "no answer on node {id}'s membership")
                }
            }
        }
        let standing = match voucher {
            Some(member) => {
                Metrics::inc(&self.metrics.peer_vouched);
                tracing::info!(
                    node = id,
                    voucher = member,
                    "a node this node's membership does not list yet is a member, says member {member}"
                );
                Standing::Vouched(Instant::now())
            }
            None => Standing::Unvouched(Instant::now()),
        };
        let mut standings = self.standings.lock().unwrap_or_else(|p| p.into_inner());
        standings.insert(id, standing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standing_lasts_its_own_time_and_a_lookup_under_way_never_expires() {
        let at = Instant::now();
        let after = |d: Duration| at + d;
        assert!(!Standing::Vouched(at).expired(after(VOUCH_TTL - Duration::from_millis(1))));
        assert!(Standing::Vouched(at).expired(after(VOUCH_TTL)));
        let cooldown = UNVOUCHED_COOLDOWN;
        assert!(!Standing::Unvouched(at).expired(after(cooldown - Duration::from_millis(1))));
        assert!(Standing::Unvouched(at).expired(after(cooldown)));
        assert!(!Standing::Asking.expired(after(VOUCH_TTL * 100)));
    }
}
