"""Fixtures of the cairn-mcp end-to-end tests.

One real auth-on 3-node cluster (``cairn_client.testing.LocalCluster``) and one
``cairn-mcp --listen`` process serve the whole session; each test uses its own key prefix.
``connect`` opens an MCP session with the official SDK's ``Client``, once over stdio (a
``cairn-mcp`` child per session, acting with ``CAIRN_TOKEN``) and once over streamable HTTP
(acting with the ``Authorization: Bearer`` header), so every test that takes it runs on both.

The binary is ``$CAIRN_MCP_BIN``, else ``$CARGO_TARGET_DIR/debug/cairn-mcp`` (built by
``cargo build --workspace --bins``). Every process started here is killed when the session
ends, whatever happened.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from cairn_client.testing import LocalCluster

from mcp_e2e import AGENT, Connect, http_client, http_server, stdio_client


@dataclass(frozen=True)
class Principal:
    name: str
    token: str


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, auth=True) as local:
        yield local


@pytest.fixture(scope="session")
def agent(cluster: LocalCluster) -> Principal:
    """A principal with every key permission (no admin), as an agent would have."""
    grants = [{"prefix": "", "permissions": ["read", "write", "forget", "revoke"]}]
    answer = httpx.post(
        f"{cluster.endpoints[0]}/v1/auth/principals",
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        json={"name": AGENT, "grants": grants},
        timeout=10,
    )
    answer.raise_for_status()
    return Principal(AGENT, answer.json()["token"])


@pytest.fixture(scope="session")
def agent_token(agent: Principal) -> str:
    return agent.token


@pytest.fixture(scope="session")
def mcp_url(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``cairn-mcp --listen`` process on a free loopback port (its log: ``mcp.log``)."""
    with http_server(cluster, tmp_path_factory.mktemp("cairn-mcp")) as url:
        yield url


@pytest.fixture(params=["stdio", "http"])
def connect(
    request: pytest.FixtureRequest, cluster: LocalCluster, agent: Principal, mcp_url: str
) -> Connect:
    """Opens an MCP session acting as ``agent``, over the transport of the parameter."""
    if request.param == "stdio":
        return lambda: stdio_client(cluster, agent.token)
    return lambda: http_client(mcp_url, agent.token)


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"mcp-{uuid.uuid4().hex[:10]}/"
