"""LocalCluster itself: a real cluster comes up, elects, survives a kill, and cleans up."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from cairn_client import Cairn, ConnectionFailed, RetryPolicy
from cairn_client.testing import ClusterError, LocalCluster, _free_ports, find_node_binary


def test_planned_ports_are_distinct() -> None:
    # Ports picked one socket at a time repeat within a few hundred picks; a node given
    # the same port twice (client and peer) refuses to start.
    ports = _free_ports(500)
    assert len(set(ports)) == len(ports)


def test_cluster_elects_a_leader_and_fails_over(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(3)
    assert len(local.endpoints) == 3
    leader = local.leader_id()
    local.kill(leader)
    assert not local.node(leader).running
    new_leader = local.wait_for_leader(exclude=leader)
    assert new_leader != leader
    local.start(leader)
    assert local.node(leader).running
    assert local.status(leader)["node_id"] == leader


def test_pause_freezes_a_node_until_resumed(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(3)
    follower = next(i for i in local.node_ids if i != local.leader_id())
    local.pause(follower)
    assert local.node(follower).paused
    with pytest.raises(httpx.TimeoutException):
        httpx.get(f"{local.node(follower).url}/healthz", timeout=0.5)
    local.resume(follower)
    assert httpx.get(f"{local.node(follower).url}/healthz", timeout=5).status_code == 200


def test_pause_returns_once_every_thread_has_stopped(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """``kill`` only queues SIGSTOP: right after it, most of the time some thread of the
    node is still running (and could answer a request a test sends next)."""
    local = make_cluster(1)
    pid = local.node(1).pid
    assert pid is not None
    for _ in range(20):
        local.pause(1)
        states = [
            (task / "stat").read_text().rpartition(") ")[2][:1]
            for task in Path(f"/proc/{pid}/task").iterdir()
        ]
        local.resume(1)
        assert set(states) == {"T"}, states


def test_auth_cluster_exposes_the_admin_token(auth_cluster: LocalCluster) -> None:
    url = auth_cluster.endpoints[0]
    assert httpx.get(f"{url}/v1/auth/whoami").status_code == 401
    headers = {"authorization": f"Bearer {auth_cluster.admin_token}"}
    whoami = httpx.get(f"{url}/v1/auth/whoami", headers=headers)
    assert whoami.json()["name"] == "admin"


def test_close_kills_every_process_and_removes_the_directory() -> None:
    local = LocalCluster(1)
    with local:
        pid = local.node(1).pid
        base = local.base_dir
        local.pause(1)  # a paused node must still be killed
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not base.exists()


def test_a_cluster_without_auth_has_no_admin_token(cluster: LocalCluster) -> None:
    with pytest.raises(ClusterError, match="without auth"):
        _ = cluster.admin_token


def test_an_explicit_binary_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="not an executable"):
        find_node_binary(tmp_path / "missing")


def test_tls_cluster_serves_https_with_its_ca(make_cluster: Callable[..., LocalCluster]) -> None:
    local = make_cluster(1, tls=True)
    assert local.endpoints[0].startswith("https://127.0.0.1:")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{local.endpoints[0]}/healthz")  # the system store does not know the CA
    trusting_the_ca = ssl.create_default_context(cafile=local.ca_cert)
    answer = httpx.get(f"{local.endpoints[0]}/healthz", verify=trusting_the_ca)
    assert answer.json()["ok"] is True


def test_a_scheme_or_ca_mistake_is_named_and_applies_nothing(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """Plain HTTP to an HTTPS node is answered in TLS: a write was ``OutcomeUnknown`` ("may
    have applied") before, though no cairn node read it. A CA that does not verify the node
    is named too."""
    local = make_cluster(1, tls=True)
    address = local.endpoints[0].removeprefix("https://")
    no_retries = RetryPolicy(retries_max=0)
    plain = Cairn([f"http://{address}"], retry=no_retries)
    with plain, pytest.raises(ConnectionFailed, match="did not answer in HTTP") as refused:
        plain.write("tls/mistake", 1, actor="t")
    assert refused.value.may_have_applied is False
    system_roots = Cairn([f"https://{address}"], retry=no_retries)
    with system_roots, pytest.raises(ConnectionFailed, match="does not verify against the CA"):
        system_roots.read("tls/mistake")


def test_a_missing_client_certificate_is_named_and_applies_nothing(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """A node started with a client CA ends the handshake of a client without a
    certificate. Under TLS 1.3 the client has sent its write by then, but the node read
    none of it: the alert is named, and the write is not ``OutcomeUnknown``."""
    local = make_cluster(1, tls=True, client_auth=True)
    anonymous = Cairn(local.endpoints, ca_cert=local.ca_cert, retry=RetryPolicy(retries_max=0))
    with anonymous, pytest.raises(ConnectionFailed, match="asks for a client certificate") as e:
        anonymous.write("tls/anonymous", 1, actor="t")
    assert e.value.may_have_applied is False
