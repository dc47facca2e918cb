"""The resource template ``cairn://key/{key}``: reading a key, and change notifications for
subscribed keys (``subscriptions/listen`` on 2026-07-28 sessions, ``resources/subscribe`` on
earlier ones)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import pytest
from cairn_client.testing import LocalCluster
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceUpdatedNotification, TextResourceContents

from mcp_e2e import Connect, http_client, http_server, mcp_binary, ok, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

# A subscription's feed opens just after its acknowledgment, so writes are repeated until one
# is seen (each repeat waits this long for its notification).
_NOTIFY_WAIT_S = 1.0
_WRITES_MAX = 10


async def test_a_key_reads_as_a_resource(connect: Connect, prefix: str) -> None:
    key = f"{prefix}notes/db"
    uri = f"cairn://key/{key}"
    with anyio.fail_after(30):
        async with connect() as client:
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["cairn://key/{key}"]
            await ok(client, "write", {"key": key, "value": {"engine": "postgres"}})
            await ok(client, "revoke", {"key": key, "reason": "it is sqlite"})
            contents = (await client.read_resource(uri)).contents
            escaped = (await client.read_resource(f"cairn://key/{prefix}notes%2Fdb")).contents
            with pytest.raises(MCPError) as missing:
                await client.read_resource(f"cairn://key/{prefix}never")
            with pytest.raises(MCPError):
                await client.read_resource("cairn://elsewhere/x")
    # A resource that does not exist: -32602 with its URI on 2026-07-28 sessions (SEP-2164;
    # earlier ones get -32002, see the legacy test below).
    assert missing.value.error.code == -32602
    assert missing.value.error.data == {"uri": f"cairn://key/{prefix}never"}
    assert all(isinstance(c, TextResourceContents) for c in contents)
    rendered, record = contents
    assert rendered.mime_type == "text/plain"
    assert rendered.text.startswith(
        f'[{key}] [REVOKED] Previously believed: {{"engine":"postgres"}}.'
    )
    assert record.mime_type == "application/json"
    assert json.loads(record.text)["revocation"]["reason"] == "it is sqlite"
    # The same key either way (`served` may differ between two reads).
    assert escaped[0].text == rendered.text  # type: ignore[union-attr]
    assert {**json.loads(escaped[1].text), "served": None} == {  # type: ignore[union-attr]
        **json.loads(record.text),
        "served": None,
    }


async def test_listen_notifies_changes_of_subscribed_keys(connect: Connect, prefix: str) -> None:
    watched, other = f"{prefix}watched key", f"{prefix}other"
    # Percent-encoded, as a client that escapes keys writes it: the notification must name
    # the key the same way, since clients match notifications by exact URI.
    uri = "cairn://key/" + quote(watched, safe="")
    with anyio.fail_after(60):
        async with connect() as client, client.listen(resource_subscriptions=[uri]) as events:
            assert events.honored.resource_subscriptions == [uri]
            for attempt in range(_WRITES_MAX):
                await ok(client, "write", {"key": other, "value": attempt})
                await ok(client, "write", {"key": watched, "value": attempt})
                with anyio.move_on_after(_NOTIFY_WAIT_S):
                    event = await events.__anext__()
                    break
            else:
                pytest.fail("no notification for the subscribed key")
    assert event.uri == uri  # type: ignore[union-attr]


# The SDK warns that resources/subscribe is legacy: this is the legacy path, on purpose.
@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_legacy_subscribe_notifies_changes(
    cluster: LocalCluster, agent_token: str, prefix: str
) -> None:
    watched = f"{prefix}legacy"
    uri, escaped = f"cairn://key/{watched}", "cairn://key/" + quote(watched, safe="")
    unwatched = f"{prefix}unwatched"
    updates: list[str] = []
    both_seen, marker_seen = anyio.Event(), anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)
            if len(updates) == 2:
                both_seen.set()
            if message.params.uri.endswith("unwatched"):
                marker_seen.set()

    server = StdioServerParameters(
        command=str(mcp_binary()),
        env={"CAIRN_ENDPOINTS": ",".join(cluster.endpoints), "CAIRN_TOKEN": agent_token},
    )
    with anyio.fail_after(30):
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            # Before 2026-07-28, a resource that does not exist is -32002, with its URI.
            with pytest.raises(MCPError) as missing:
                await client.read_resource(f"cairn://key/{prefix}never")
            assert (missing.value.error.code, missing.value.error.data) == (
                -32002,
                {"uri": f"cairn://key/{prefix}never"},
            )
            await client.subscribe_resource(uri)
            await client.subscribe_resource(escaped)
            await ok(client, "write", {"key": unwatched, "value": 1})
            await ok(client, "write", {"key": watched, "value": 1})
            await both_seen.wait()
            # Unsubscribing one spelling of the key ends both subscriptions. The feed is in
            # revision order, so a notification of the next write would come before the
            # marker's.
            await client.unsubscribe_resource(escaped)
            await ok(client, "write", {"key": watched, "value": 2})
            await client.subscribe_resource(f"cairn://key/{unwatched}")
            await ok(client, "write", {"key": unwatched, "value": 2})
            await marker_seen.wait()
            await client.unsubscribe_resource(f"cairn://key/{unwatched}")
    # One notification under each URI the key was subscribed with, none after the
    # unsubscription, then the marker's.
    assert sorted(updates[:2]) == sorted([uri, escaped])
    assert updates[2:] == [f"cairn://key/{unwatched}"]


def _reader_of(cluster: LocalCluster, prefix: str) -> str:
    """The token of a new principal that may read and write under ``prefix`` only."""
    name = f"sub-{prefix.strip('/')}"
    made = httpx.post(
        f"{cluster.endpoints[0]}/v1/auth/principals",
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        json={"name": name, "grants": [{"prefix": prefix, "permissions": ["read", "write"]}]},
        timeout=10,
    )
    made.raise_for_status()
    return str(made.json()["token"])


def _denied(error: MCPError) -> None:
    """The error a `resources/read` of a key beyond the caller's grants gets."""
    assert error.error.code == -32603, error.error
    assert error.error.message.startswith("permission_denied"), error.error


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_listen_beyond_the_grants_is_refused(
    cluster: LocalCluster, agent_token: str, mcp_url: str, prefix: str, transport: str
) -> None:
    """A `subscriptions/listen` naming a key the caller may not read is refused whole, with
    the error a read of it gets; one inside the grants (a key not written yet) is
    acknowledged and notified, undisturbed by the refused ones."""
    reader = _reader_of(cluster, prefix)
    inside = f"cairn://key/{prefix}inside"
    outside_key = f"elsewhere-{prefix}outside"
    outside = f"cairn://key/{outside_key}"
    session = (
        stdio_client(cluster, reader) if transport == "stdio" else http_client(mcp_url, reader)
    )
    seen: list[str] = []
    with anyio.fail_after(60):
        async with (
            session as client,
            stdio_client(cluster, agent_token) as agent,
            client.listen(resource_subscriptions=[inside]) as events,
        ):
            assert events.honored.resource_subscriptions == [inside]
            with pytest.raises(MCPError) as alone:
                async with client.listen(resource_subscriptions=[outside]):
                    pytest.fail("a subscription beyond the grants was acknowledged")
            _denied(alone.value)
            with pytest.raises(MCPError) as mixed:
                async with client.listen(resource_subscriptions=[f"{inside}2", outside]):
                    pytest.fail("a batch with a key beyond the grants was acknowledged")
            _denied(mixed.value)
            for attempt in range(_WRITES_MAX):
                # The outside key changes first: the feed is in revision order.
                await ok(agent, "write", {"key": outside_key, "value": attempt})
                await ok(client, "write", {"key": f"{prefix}inside", "value": attempt})
                with anyio.move_on_after(_NOTIFY_WAIT_S):
                    event = await events.__anext__()
                    seen.append(event.uri)  # type: ignore[union-attr]
                    break
            else:
                pytest.fail("no notification for the subscribed key")
    assert seen == [inside]


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_legacy_subscribe_beyond_the_grants_is_refused(
    cluster: LocalCluster, agent_token: str, prefix: str
) -> None:
    """`resources/subscribe` of a key the caller may not read is refused as its read is,
    and records nothing; one inside the grants is acknowledged and notified."""
    reader = _reader_of(cluster, prefix)
    inside = f"cairn://key/{prefix}inside"
    outside_key = f"elsewhere-{prefix}outside"
    updates: list[str] = []
    inside_seen = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            updates.append(message.params.uri)
            if message.params.uri == inside:
                inside_seen.set()

    server = StdioServerParameters(
        command=str(mcp_binary()),
        env={"CAIRN_ENDPOINTS": ",".join(cluster.endpoints), "CAIRN_TOKEN": reader},
    )
    with anyio.fail_after(30):
        async with (
            Client(server, mode="legacy", message_handler=on_message) as client,
            stdio_client(cluster, agent_token) as agent,
        ):
            await client.subscribe_resource(inside)
            with pytest.raises(MCPError) as denied:
                await client.subscribe_resource(f"cairn://key/{outside_key}")
            _denied(denied.value)
            # The feed is in revision order: a notification of the outside key would come
            # before the inside key's.
            await ok(agent, "write", {"key": outside_key, "value": 1})
            await ok(client, "write", {"key": f"{prefix}inside", "value": 1})
            await inside_seen.wait()
    assert updates == [inside]


def _logging_server(endpoints: list[str], token: str, log_path: Path, *flags: str) -> Client:
    """A stdio session with a cairn-mcp at its default log filter (no ``RUST_LOG``), its
    stderr in ``log_path``."""
    return Client(
        StdioServerParameters(
            command="/bin/sh",
            args=["-c", 'exec "$0" "$@" 2>"$LOG"', str(mcp_binary()), *flags],
            env={
                "CAIRN_ENDPOINTS": ",".join(endpoints),
                "CAIRN_TOKEN": token,
                "LOG": str(log_path),
            },
        )
    )


async def test_routine_resource_errors_log_no_warning(
    cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    """A resource read of a key never written, beyond the grants or named by a bad URI, and
    a refused subscription, are answers to the caller, not the operator's concern: no WARN
    line at the default log level. A cluster no node of which answers still is one."""
    reader = _reader_of(cluster, prefix)
    log_path = tmp_path / "mcp.log"
    with anyio.fail_after(30):
        async with _logging_server(cluster.endpoints, reader, log_path) as client:
            for uri in [
                f"cairn://key/{prefix}never",
                f"cairn://key/elsewhere-{prefix}k",
                "cairn://key/%zz",
                "cairn://elsewhere/x",
            ]:
                with pytest.raises(MCPError):
                    await client.read_resource(uri)
            with pytest.raises(MCPError):
                async with client.listen(
                    resource_subscriptions=[f"cairn://key/elsewhere-{prefix}k"]
                ):
                    pass
            # The log is written as things happen: a call after the refusals orders them.
            await ok(client, "list", {"prefix": prefix})
    log = log_path.read_text()
    assert " WARN " not in log, log
    assert " ERROR " not in log, log

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    log_path = tmp_path / "unreachable.log"
    flags = ["--retries", "0", "--timeout-ms", "500"]
    with anyio.fail_after(30):
        async with _logging_server([dead], reader, log_path, *flags) as client:
            with pytest.raises(MCPError) as unreachable:
                await client.read_resource(f"cairn://key/{prefix}k")
    assert unreachable.value.error.message.startswith("cairn cluster unavailable")
    warnings = [line for line in log_path.read_text().splitlines() if " WARN " in line]
    assert any("cairn cluster unavailable" in line for line in warnings), log_path.read_text()


async def test_a_listen_its_client_closes_logs_nothing_over_http(
    cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    """Closing a `subscriptions/listen` stream is how a subscription ends: at the default
    log filter it is no WARN or ERROR line (rmcp logged one for each, as it could not send
    the listen's answer to the closed stream)."""
    reader = _reader_of(cluster, prefix)
    uri = f"cairn://key/{prefix}k"
    with http_server(cluster, tmp_path) as url:
        with anyio.fail_after(30):
            async with http_client(url, reader) as client:
                for _ in range(3):
                    async with client.listen(resource_subscriptions=[uri]) as events:
                        assert events.honored.resource_subscriptions == [uri]
                await ok(client, "write", {"key": f"{prefix}k", "value": 1})
        # The server logs a closed stream's end as it notices it: give it the time to.
        await anyio.sleep(0.5)
    log = (tmp_path / "mcp.log").read_text()
    assert " WARN " not in log, log
    assert " ERROR " not in log, log
