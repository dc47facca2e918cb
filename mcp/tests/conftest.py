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

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from cairn_client.testing import LocalCluster

from mcp_e2e import AGENT, Connect, http_client, mcp_binary, stdio_client

_START_WAIT_S = 15.0


@dataclass(frozen=True)
class Principal:
    name: str
    token: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", ""), "CAIRN_ENDPOINTS": ",".join(cluster.endpoints)}
    log_path = tmp_path_factory.mktemp("cairn-mcp") / "mcp.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(mcp_binary()), "--listen", f"127.0.0.1:{port}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + _START_WAIT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"cairn-mcp --listen did not start: {log_path.read_text()}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


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
