//! The addresses an init or a join gives a member, compared as the resolver sees them.
//!
//! A membership keeps addresses as written (`localhost:7401`), and peers and clients reach
//! a member through the system resolver. Two spellings of one socket address
//! (`localhost:7401`, `127.0.0.1:7401`) are one address: a check that compared text would
//! let two ids share one process (it then answers for both, and refuses the requests
//! meant for the other one), or one node serve clients and peers on one port.

use std::net::SocketAddr;
use std::time::Duration;

use super::error::ApiError;
use crate::consensus::{NodeId, NodeInfo};

/// How long a membership change waits for the resolver to name one address.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A member's addresses, as written and as resolved.
pub struct MemberAddresses<'a> {
    pub info: &'a NodeInfo,
    client: Vec<SocketAddr>,
    peer: Vec<SocketAddr>,
}

impl<'a> MemberAddresses<'a> {
    /// `info`'s addresses for a new member: each must resolve (a member the leader cannot
    /// reach would count as dead in every quorum check, as `--client-addr` is refused at
    /// start), and the two must be two socket addresses. 400 naming the field
    /// (`{at}client_addr`, `{at}peer_addr`) otherwise.
    pub async fn of_new(id: NodeId, info: &'a NodeInfo, at: &str) -> Result<Self, ApiError> {
        let client = resolved_or_refused(id, "client_addr", &info.client_addr, at).await?;
        let peer = resolved_or_refused(id, "peer_addr", &info.peer_addr, at).await?;
        let addresses = MemberAddresses { info, client, peer };
        if overlap(&addresses.client, &addresses.peer) {
            return Err(ApiError::invalid(format!(
                "node {id}: client_addr {} and peer_addr {} are one address: they must differ",
                info.client_addr, info.peer_addr
            ))
            .with("field", format!("{at}peer_addr")));
        }
        Ok(addresses)
    }

    /// A member's addresses as far as they resolve now (a member's are compared by text
    /// where they do not).
    pub async fn of_member(info: &'a NodeInfo) -> Self {
        MemberAddresses {
            info,
            client: resolved(&info.client_addr).await.unwrap_or_default(),
            peer: resolved(&info.peer_addr).await.unwrap_or_default(),
        }
    }

    /// The field of `self` (`client_addr` or `peer_addr`) that names an address of
    /// `other` too, if any. Two members at one address would be one process answering
    /// for two ids.
    pub fn shared_with(&self, other: &MemberAddresses<'_>) -> Option<&'static str> {
        let theirs = [
            (&other.info.client_addr, &other.client),
            (&other.info.peer_addr, &other.peer),
        ];
        [
            ("client_addr", &self.info.client_addr, &self.client),
            ("peer_addr", &self.info.peer_addr, &self.peer),
        ]
        .into_iter()
        .find(|(_, text, resolved)| {
            theirs
                .iter()
                .any(|(their_text, theirs)| text == their_text || overlap(resolved, theirs))
        })
        .map(|(field, _, _)| field)
    }

    /// Whether `self` and `other` name the same client and the same peer address, however
    /// spelled (`localhost:7501` is `127.0.0.1:7501`).
    pub fn same_as(&self, other: &MemberAddresses<'_>) -> bool {
        let same =
            |text: &str, resolved: &[SocketAddr], their_text: &str, theirs: &[SocketAddr]| {
                text == their_text || overlap(resolved, theirs)
            };
        same(
            &self.info.client_addr,
            &self.client,
            &other.info.client_addr,
            &other.client,
        ) && same(
            &self.info.peer_addr,
            &self.peer,
            &other.info.peer_addr,
            &other.peer,
        )
    }

    /// The address `field` names, as written.
    pub fn written(&self, field: &str) -> &str {
        match field {
            "client_addr" => &self.info.client_addr,
            _ => &self.info.peer_addr,
        }
    }
}

/// Whether two resolutions share a socket address.
fn overlap(ours: &[SocketAddr], theirs: &[SocketAddr]) -> bool {
    ours.iter().any(|addr| theirs.contains(addr))
}

async fn resolved_or_refused(
    id: NodeId,
    field: &str,
    addr: &str,
    at: &str,
) -> Result<Vec<SocketAddr>, ApiError> {
    resolved(addr).await.ok_or_else(|| {
        ApiError::invalid(format!(
            "node {id}: {field} {addr}: the host does not resolve here (within {} s); \
             give an IP address or a name this node's resolver knows",
            RESOLVE_TIMEOUT.as_secs()
        ))
        .with("field", format!("{at}{field}"))
    })
}

/// The socket addresses `addr` names, through the system resolver; `None` when it names
/// none within [`RESOLVE_TIMEOUT`].
async fn resolved(addr: &str) -> Option<Vec<SocketAddr>> {
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(addr)).await;
    let addrs: Vec<SocketAddr> = found.ok()?.ok()?.collect();
    (!addrs.is_empty()).then_some(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(client: &str, peer: &str) -> NodeInfo {
        NodeInfo {
            client_addr: client.into(),
            peer_addr: peer.into(),
        }
    }

    #[tokio::test]
    async fn two_spellings_of_one_address_are_one_address() {
        let (a, b) = (
            info("127.0.0.1:7401", "127.0.0.1:7501"),
            info("localhost:7402", "localhost:7501"),
        );
        let (a, b) = (
            MemberAddresses::of_new(1, &a, "").await.unwrap(),
            MemberAddresses::of_new(2, &b, "").await.unwrap(),
        );
        assert_eq!(b.shared_with(&a), Some("peer_addr"));
        assert_eq!(b.written("peer_addr"), "localhost:7501");
        let c = info("127.0.0.1:7403", "127.0.0.1:7503");
        let c = MemberAddresses::of_new(3, &c, "").await.unwrap();
        assert_eq!(c.shared_with(&a), None);
        // A member's client port named as another's peer port is shared too.
        let d = info("127.0.0.2:7404", "localhost:7401");
        let d = MemberAddresses::of_new(4, &d, "").await.unwrap();
        assert_eq!(d.shared_with(&a), Some("peer_addr"));
    }

    #[tokio::test]
    async fn a_new_member_needs_two_addresses_that_resolve() {
        let one = info("localhost:7401", "127.0.0.1:7401");
        let err = MemberAddresses::of_new(1, &one, "nodes[0].")
            .await
            .err()
            .unwrap();
        assert_eq!(err.details["field"], "nodes[0].peer_addr");
        let unknown = info("nosuch.invalid:7401", "127.0.0.1:7501");
        let err = MemberAddresses::of_new(1, &unknown, "")
            .await
            .err()
            .unwrap();
        assert_eq!(err.details["field"], "client_addr");
        assert!(err.message.contains("does not resolve"), "{}", err.message);
        // A member already in the membership is compared by text where it does not.
        let kept = MemberAddresses::of_member(&unknown).await;
        let same = info("nosuch.invalid:7401", "127.0.0.1:7502");
        assert_eq!(
            MemberAddresses::of_member(&same).await.shared_with(&kept),
            Some("client_addr")
        );
    }
}
