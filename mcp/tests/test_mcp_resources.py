"""The resource template ``cairn://key/{key}``: reading a key, and change notifications for
subscribed keys (``subscriptions/listen`` on 2026-07-28 sessions, ``resources/subscribe`` on
earlier ones)."""

from __future__ import annotations

import json
from urllib.parse import quote

import anyio
import pytest
from cairn_client.testing import LocalCluster
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceUpdatedNotification, TextResourceContents

from mcp_e2e import Connect, mcp_binary, ok

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
