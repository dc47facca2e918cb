"""Failover under one MCP session: with the leader killed between calls, the server finds the
new leader by itself, and every call is applied exactly once."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from cairn_client.testing import LocalCluster

from mcp_e2e import ok, stdio_client

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
