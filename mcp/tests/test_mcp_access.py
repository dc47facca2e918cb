"""Callers without a valid token are refused: HTTP 401 on the streamable HTTP endpoint, and
the unauthenticated error as the result of every tool over stdio; a token acts only as its
own principal."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from cairn_client.testing import LocalCluster
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_e2e import AGENT, http_client, mcp_binary, ok, refused, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer cairn_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "Basic YTpi"],
)
def test_http_callers_without_a_valid_token_get_401(
    mcp_url: str, authorization: str | None
) -> None:
    headers = dict(HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = httpx.post(mcp_url, headers=headers, json=INITIALIZE, timeout=10)
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert "cairn_AAAA" not in answer.text


def test_http_two_authorization_headers_get_401(
    mcp_url: str, agent_token: str, cluster: LocalCluster
) -> None:
    """Two tokens, each valid alone: which names the caller is not defined (a proxy in front
    may read the other), so the request is refused, as the nodes refuse it."""
    headers = [
        *HEADERS.items(),
        ("Authorization", f"Bearer {agent_token}"),
        ("Authorization", f"Bearer {cluster.admin_token}"),
    ]
    answer = httpx.post(mcp_url, headers=headers, json=INITIALIZE, timeout=10)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert "more than one Authorization header" in answer.json()["error"]["message"]


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_http_the_bearer_scheme_is_matched_in_any_case(
    mcp_url: str, agent_token: str, scheme: str
) -> None:
    """RFC 9110 §11.1: the scheme name is case-insensitive, as the nodes take it."""
    headers = {**HEADERS, "Authorization": f"{scheme} {agent_token}"}
    answer = httpx.post(mcp_url, headers=headers, json=INITIALIZE, timeout=10)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("change", ["rotate", "delete"])
def test_http_a_token_rotated_away_or_deleted_gets_401_at_once(
    cluster: LocalCluster, mcp_url: str, change: str
) -> None:
    """A token the server has seen work is checked again on every request (SPEC §9): a
    fresh ``initialize`` and a tool call in the session it opened are both answered 401."""
    node = cluster.endpoints[0]
    admin = {"Authorization": f"Bearer {cluster.admin_token}"}
    name = f"mcp-{change}"
    grants = [{"prefix": "", "permissions": ["read", "write"]}]
    made = httpx.post(
        f"{node}/v1/auth/principals",
        headers=admin,
        json={"name": name, "grants": grants},
        timeout=10,
    )
    assert made.status_code == 200, made.text
    old = made.json()["token"]

    def initialize(token: str) -> httpx.Response:
        headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        return httpx.post(mcp_url, headers=headers, json=INITIALIZE, timeout=10)

    first = initialize(old)
    assert first.status_code == 200, first.text
    session = {
        **HEADERS,
        "Authorization": f"Bearer {old}",
        "Mcp-Session-Id": first.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(mcp_url, headers=session, json=initialized, timeout=10).is_success

    def read() -> httpx.Response:
        call = {"name": "read", "arguments": {"key": f"{name}/k"}}
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        return httpx.post(mcp_url, headers=session, json=message, timeout=10)

    before = read()
    assert before.status_code == 200, before.text
    if change == "rotate":
        changed = httpx.post(f"{node}/v1/auth/principals/{name}/rotate", headers=admin, timeout=10)
    else:
        changed = httpx.delete(f"{node}/v1/auth/principals/{name}", headers=admin, timeout=10)
    assert changed.status_code == 200, changed.text
    for after in (initialize(old), read()):
        assert after.status_code == 401, after.text
        assert after.headers["www-authenticate"] == "Bearer"
        assert after.json()["error"]["code"] == "unauthenticated"
    if change == "rotate":
        assert initialize(changed.json()["token"]).status_code == 200


def test_http_a_session_answers_only_the_principal_that_opened_it(
    cluster: LocalCluster, mcp_url: str, agent_token: str
) -> None:
    """Another principal that learns a session's id gets 404 for it, as for an unknown
    session: no tool call, no notification stream and no close on the owner's session."""
    opened = httpx.post(
        mcp_url,
        headers={**HEADERS, "Authorization": f"Bearer {agent_token}"},
        json=INITIALIZE,
        timeout=10,
    )
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]

    def session(token: str) -> dict[str, str]:
        return {
            **HEADERS,
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session_id,
            "MCP-Protocol-Version": "2025-11-25",
        }

    owner, other = session(agent_token), session(cluster.admin_token)
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(mcp_url, headers=owner, json=initialized, timeout=10).is_success
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for method, body in (("POST", tools_list), ("GET", None), ("DELETE", None)):
        answer = httpx.request(method, mcp_url, headers=other, json=body, timeout=10)
        assert answer.status_code == 404, f"{method}: {answer.status_code} {answer.text}"
    assert httpx.post(mcp_url, headers=owner, json=tools_list, timeout=10).status_code == 200
    assert httpx.delete(mcp_url, headers=owner, timeout=10).status_code == 204
    closed = httpx.post(mcp_url, headers=owner, json=tools_list, timeout=10)
    assert closed.status_code == 404, closed.text


def test_http_serves_mcp_at_its_path_only(mcp_url: str, agent_token: str) -> None:
    """A request to any other path is 404, whatever its body: a client pointed at the
    wrong URL (a node's API path, say) learns so instead of reading a JSON-RPC error."""
    headers = {**HEADERS, "Authorization": f"Bearer {agent_token}"}
    base = mcp_url.removesuffix("/mcp")
    for path, body in (("/v1/read", {"key": "a"}), ("/mcp/x", INITIALIZE), ("/", INITIALIZE)):
        answer = httpx.post(base + path, headers=headers, json=body, timeout=10)
        assert answer.status_code == 404, f"{path}: {answer.status_code} {answer.text}"
    assert httpx.post(mcp_url, headers=headers, json=INITIALIZE, timeout=10).status_code == 200


async def test_http_a_legacy_session_closes_without_a_warning(
    mcp_url: str, agent_token: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK closes its session with DELETE and logs a warning unless the answer is 200
    or 204 (rmcp's own answer is 202)."""
    closes: list[int] = []

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "DELETE":
            closes.append(response.status_code)

    caplog.set_level(logging.INFO, logger="mcp")
    hooks = {"response": [on_response]}
    with anyio.fail_after(30):
        async with http_client(mcp_url, agent_token, mode="legacy", event_hooks=hooks) as client:
            await client.list_tools()
    assert closes == [204]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []


async def test_http_client_without_token_cannot_connect(mcp_url: str) -> None:
    with anyio.fail_after(30), pytest.raises(Exception):  # noqa: B017, PT011
        async with http_client(mcp_url, None) as client:
            await client.list_tools()


async def test_stdio_without_token_is_refused_by_every_tool(cluster: LocalCluster) -> None:
    with anyio.fail_after(30):
        async with stdio_client(cluster, None) as client:
            assert len((await client.list_tools()).tools) == 11
            for tool, arguments in [
                ("write", {"key": "mcp-anon/k", "value": 1}),
                ("read", {"key": "mcp-anon/k"}),
                ("recall", {"cues": ["topic:x"]}),
            ]:
                message = await refused(client, tool, arguments)
                assert message.startswith("unauthenticated:"), message
                assert "CAIRN_TOKEN" in message


async def test_each_http_token_acts_as_its_principal(
    cluster: LocalCluster, agent_token: str, mcp_url: str, prefix: str
) -> None:
    """Two callers of one server, interleaved: each change is recorded as its own principal."""
    with anyio.fail_after(30):
        async with (
            http_client(mcp_url, cluster.admin_token) as admin,
            http_client(mcp_url, agent_token) as agent,
        ):
            for round_ in range(3):
                await ok(admin, "write", {"key": f"{prefix}a", "value": round_})
                await ok(agent, "write", {"key": f"{prefix}b", "value": round_})
            actors = {
                key: {e["actor"] for e in (await ok(agent, "history", {"key": key}))["events"]}
                for key in (f"{prefix}a", f"{prefix}b")
            }
    assert actors == {f"{prefix}a": {"admin"}, f"{prefix}b": {AGENT}}


async def test_a_write_beyond_the_grants_is_a_permission_denied_result(
    cluster: LocalCluster, mcp_url: str, prefix: str
) -> None:
    grants = [{"prefix": prefix, "permissions": ["read"]}]
    made = httpx.post(
        f"{cluster.endpoints[0]}/v1/auth/principals",
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        json={"name": f"reader-{prefix.strip('/')}", "grants": grants},
        timeout=10,
    )
    made.raise_for_status()
    with anyio.fail_after(30):
        async with http_client(mcp_url, made.json()["token"]) as reader:
            message = await refused(reader, "write", {"key": f"{prefix}k", "value": 1})
            assert message.startswith("permission_denied:"), message
            message = await refused(reader, "read", {"key": "elsewhere/k"})
            assert message.startswith("permission_denied:"), message
            listed = await ok(reader, "list", {"prefix": prefix})
            with pytest.raises(MCPError) as denied:
                await reader.read_resource("cairn://key/elsewhere/k")
    assert listed["items"] == []
    # A refused resource read is a JSON-RPC error (resources have no isError result) whose
    # message starts with the code, as a tool's does; -32603 is not "cluster unavailable".
    assert denied.value.error.code == -32603
    assert denied.value.error.message.startswith("permission_denied:"), denied.value.error


async def test_stdio_token_sources_in_the_cli_order(
    cluster: LocalCluster, agent_token: str, prefix: str, tmp_path: Path
) -> None:
    """``--token-file`` beats ``CAIRN_TOKEN``, which beats ``CAIRN_TOKEN_FILE``."""
    agent_file, admin_file = tmp_path / "agent.token", tmp_path / "admin.token"
    agent_file.write_text(f"{agent_token}\n")
    admin_file.write_text(f"{cluster.admin_token}\n")
    endpoints = ",".join(cluster.endpoints)
    cases = {
        "flag": ([f"--token-file={agent_file}"], {"CAIRN_TOKEN": cluster.admin_token}),
        "env": ([], {"CAIRN_TOKEN": agent_token, "CAIRN_TOKEN_FILE": str(admin_file)}),
        "env-file": ([], {"CAIRN_TOKEN_FILE": str(agent_file)}),
    }
    with anyio.fail_after(30):
        for case, (args, env) in cases.items():
            server = StdioServerParameters(
                command=str(mcp_binary()), args=args, env={"CAIRN_ENDPOINTS": endpoints, **env}
            )
            async with Client(server) as client:
                await ok(client, "write", {"key": f"{prefix}{case}", "value": 1})
                history = await ok(client, "history", {"key": f"{prefix}{case}"})
            assert history["events"][0]["actor"] == AGENT, case
