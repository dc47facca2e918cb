"""Failover under one MCP session: with the leader killed between calls, the server finds the
new leader by itself, and every call is applied exactly once; with the majority lost, a call
over HTTP still gets the cluster's own answer, and a write ends within the call timeout."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from cairn_client.testing import LocalCluster

from mcp_e2e import http_client, http_server, ok, refused, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, auth=True) as local:
        yield local


async def test_calls_survive_a_leader_kill(own_cluster: LocalCluster) -> None:
    key = "failover/counter"
    with anyio.fail_after(60):
        async with stdio_client(own_cluster, own_cluster.admin_token) as client:
            await ok(client, "write", {"key": key, "value": 0})
            own_cluster.kill(own_cluster.leader_id())
            for value in range(1, 4):
                written = await ok(client, "write", {"key": key, "value": value})
                assert written["version"] == value + 1
            history = await ok(client, "history", {"key": key})
    assert [e["version"] for e in history["events"]] == [1, 2, 3, 4]


async def test_http_calls_without_a_majority_get_the_clusters_answer(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The server checks an HTTP caller's token with the cluster on every request, and that
    check needs a leader with a majority. Without one, a token the server confirmed before
    acts as its principal, and the call gets what the cluster answers: an ``any`` read served
    by the survivor, a linearizable read refused, each a tool result as over stdio (not an
    HTTP error for the whole request)."""
    key = "failover/alone"
    with http_server(own_cluster, tmp_path) as url, anyio.fail_after(80):
        async with http_client(url, own_cluster.admin_token) as client:
            await ok(client, "write", {"key": key, "value": "kept"})
            leader = own_cluster.leader_id()
            for node_id in range(1, 4):
                if node_id != leader:
                    own_cluster.kill(node_id)
            read = await ok(client, "read", {"key": key, "consistency": "any"})
            assert read["value"] == "kept"
            # The first request waited for a check that cannot end; once the cluster was
            # found undecided, a confirmed token acts at once (5-6 s each before).
            started = time.monotonic()
            again = await ok(client, "read", {"key": key, "consistency": "any"})
            waited = time.monotonic() - started
            assert again["value"] == "kept"
            refusal = await refused(client, "read", {"key": key})
            bounded = {"key": key, "consistency": "bounded", "max_staleness_ms": 100}
            bounded_refusal = await refused(client, "read", bounded)
    assert waited < 2, waited
    assert refusal.startswith(("stale_read", "no_leader")), refusal
    # SPEC §3: a node cut off from the majority answers a bounded read `stale_read`; the
    # re-read at a leader that cannot be confirmed does not replace that answer.
    assert bounded_refusal.startswith("stale_read"), bounded_refusal


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_write_without_a_majority_ends_within_the_call_timeout(
    own_cluster: LocalCluster, tmp_path: Path, transport: str
) -> None:
    """A leader that lost its majority holds a write it cannot commit. The server ends the
    call at ``--call-timeout-ms`` with ``outcome_unknown`` and the ``request_id`` to repeat,
    instead of retrying for over a minute (about 67 s with the default retries), past the
    60 s after which the official TypeScript SDK stops waiting for a tool call. Over HTTP
    the bound counts from the request's arrival, so the token check that also waits for
    the lost majority comes out of the same time."""
    key = "failover/unsettled"
    call_timeout_s = 3
    flags = ("--call-timeout-ms", str(call_timeout_s * 1000))
    token = own_cluster.admin_token
    with contextlib.ExitStack() as stack, anyio.fail_after(60):
        if transport == "http":
            url = stack.enter_context(http_server(own_cluster, tmp_path, *flags))
            session = http_client(url, token)
        else:
            session = stdio_client(own_cluster, token, *flags)
        async with session as client:
            await ok(client, "write", {"key": key, "value": "before"})
            leader = own_cluster.leader_id()
            for node_id in range(1, 4):
                if node_id != leader:
                    own_cluster.kill(node_id)
            started = time.monotonic()
            refusal = await refused(client, "write", {"key": key, "value": "after"})
            waited = time.monotonic() - started
    assert refusal.startswith("outcome_unknown"), refusal
    assert "request_id" in refusal, refusal
    # The bound plus the server's own work; the default retries alone take over 50 s.
    assert waited < call_timeout_s + 2, waited
