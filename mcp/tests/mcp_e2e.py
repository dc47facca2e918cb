"""What the MCP end-to-end tests share: the agent principal's name, the cairn-mcp binary,
MCP sessions over stdio and streamable HTTP (the official SDK's ``Client``), and readers of
tool results."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cairn_client.testing import LocalCluster
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

# The principal the tests' MCP sessions act as.
AGENT = "mcp-agent"

# How long a started ``cairn-mcp --listen`` may take to accept connections.
_START_WAIT_S = 15.0

# Opens an MCP session (see the `connect` fixture).
Connect = Callable[[], AbstractAsyncContextManager[Client]]


def mcp_binary() -> Path:
    """``$CAIRN_MCP_BIN``, else ``$CARGO_TARGET_DIR/debug/cairn-mcp``."""
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/cairn/target")
    path = Path(os.environ.get("CAIRN_MCP_BIN") or Path(target) / "debug" / "cairn-mcp")
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"no cairn-mcp at {path}: run `cargo build --workspace --bins`")
    return path


def stdio_client(cluster: LocalCluster, token: str | None, *flags: str) -> Client:
    """A session with a cairn-mcp child acting with ``token`` (none: no CAIRN_TOKEN),
    started with ``flags``."""
    env = {"CAIRN_ENDPOINTS": ",".join(cluster.endpoints), "RUST_LOG": "warn"}
    if token is not None:
        env["CAIRN_TOKEN"] = token
    return Client(StdioServerParameters(command=str(mcp_binary()), args=list(flags), env=env))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(cluster: LocalCluster, log_dir: Path, *flags: str) -> Iterator[str]:
    """A ``cairn-mcp --listen`` process for ``cluster`` on a free loopback port, with
    ``flags`` added, killed on exit; yields its URL. Its log is ``log_dir/mcp.log``."""
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", ""), "CAIRN_ENDPOINTS": ",".join(cluster.endpoints)}
    log_path = log_dir / "mcp.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(mcp_binary()), "--listen", f"127.0.0.1:{port}", *flags],
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


@asynccontextmanager
async def http_client(
    url: str, token: str | None, *, mode: str = "auto", **http_options: Any
) -> AsyncIterator[Client]:
    """A session with the server at ``url``, sending ``token`` as the bearer token;
    ``mode`` is the SDK's (``"legacy"``: an ``initialize`` handshake and a session id),
    ``http_options`` go to the HTTP client."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30, read=60)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, **http_options) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        yield client


def text(result: CallToolResult) -> str:
    """The first text block: the lines meant for the model."""
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def first_line(result: CallToolResult) -> str:
    return text(result).splitlines()[0]


async def ok(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Calls ``tool`` and returns its structured output, failing on an error result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments}: {text(result)}"
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """Calls ``tool``, expects an error result, and returns its text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} {arguments} was not refused: {result}"
    assert result.structured_content is None
    return text(result)
