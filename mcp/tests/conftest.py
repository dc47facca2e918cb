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
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from cairn_client.testing import LocalCluster
from mcp_e2e import AGENT, Connect

_START_WAIT_S = 15.0


@dataclass(frozen=True)
class Principal:
    name: str
    token: str


def mcp_binary() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/cairn/target")
    path = Path(os.environ.get("CAIRN_MCP_BIN") or Path(target) / "debug" / "cairn-mcp")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"no cairn-mcp at {path}: run `cargo build --workspace --bins`")
    return path


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
def mcp_url(cluster: LocalCluster) -> Iterator[str]:
    """A ``cairn-mcp --listen`` process on a free loopback port."""
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", ""), "CAIRN_ENDPOINTS": ",".join(cluster.endpoints)}
    process = subprocess.Popen(
        [str(mcp_binary()), "--listen", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + _START_WAIT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    stderr = process.stderr.read().decode() if process.stderr else ""
                    pytest.fail(f"cairn-mcp --listen did not start: {stderr}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def stdio_client(cluster: LocalCluster, token: str | None) -> Client:
    env = {"CAIRN_ENDPOINTS": ",".join(cluster.endpoints), "RUST_LOG": "warn"}
    if token is not None:
        env["CAIRN_TOKEN"] = token
    return Client(StdioServerParameters(command=str(mcp_binary()), env=env))


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            yield client


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
