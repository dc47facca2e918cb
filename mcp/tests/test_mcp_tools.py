"""The eleven tools over stdio and streamable HTTP: schemas, hints, every call, exactly-once
request ids, and identity that no argument can set."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from cairn_client.testing import LocalCluster
from mcp import Client, StdioServerParameters

from mcp_e2e import AGENT, Connect, first_line, mcp_binary, ok, refused, text

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

READS = {"read", "recall", "list", "history", "probe"}
MUTATIONS = {"write", "forget", "revoke", "reinstate", "supersede", "flag_stale"}
DESTRUCTIVE = {"forget", "revoke"}
IDEMPOTENT_MUTATIONS = {"forget", "revoke", "reinstate"}


async def test_tools_have_schemas_hints_and_no_actor(connect: Connect) -> None:
    with anyio.fail_after(30):
        async with connect() as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "recall" in (client.instructions or "")
            assert "Do not re-derive" in (client.instructions or "")
    assert set(tools) == READS | MUTATIONS
    for name, tool in tools.items():
        properties = tool.input_schema.get("properties", {})
        assert "actor" not in properties, name
        assert tool.input_schema.get("additionalProperties") is False, name
        assert tool.description, name
        assert tool.output_schema is not None, name
        assert tool.output_schema["type"] == "object", name
        hints = tool.annotations
        assert hints is not None, name
        assert hints.read_only_hint is (name in READS), name
        assert hints.open_world_hint is False, name
        if name in MUTATIONS:
            assert hints.destructive_hint is (name in DESTRUCTIVE), name
            assert hints.idempotent_hint is (name in IDEMPOTENT_MUTATIONS), name
            request_id = properties["request_id"]
            assert (request_id["minLength"], request_id["maxLength"]) == (1, 128), name
        if "key" in properties:
            assert (properties["key"]["minLength"], properties["key"]["maxLength"]) == (1, 512)
    for name in ("list", "recall"):
        limit = tools[name].input_schema["properties"]["limit"]
        assert (limit["minimum"], limit["maximum"]) == (1, 1000), name
    assert tools["write"].input_schema["required"] == ["key", "value"]
    assert set(tools["recall"].input_schema["required"]) == {"cues"}
    assert "warnings" in tools["write"].output_schema["properties"]
    assert "rendered" in str(tools["recall"].output_schema)


async def test_every_tool_answers(connect: Connect, prefix: str) -> None:
    key, other = f"{prefix}db", f"{prefix}db2"
    with anyio.fail_after(60):
        async with connect() as client:
            written = await ok(
                client,
                "write",
                {"key": key, "value": "postgres 16", "anchors": [f"path:{prefix}src/db/"]},
            )
            assert (written["state"], written["version"], written["replayed"]) == (
                "active",
                1,
                False,
            )
            assert len(written["request_id"]) == 32
            assert written["warnings"] == []

            read = await ok(client, "read", {"key": key})
            assert read["value"] == "postgres 16"
            assert read["rendered"] == f"[{key}] postgres 16"
            assert read["meta"]["actor"] == AGENT

            recalled = await ok(client, "recall", {"cues": [f"path:{prefix}src/db/schema.rs"]})
            assert [n["key"] for n in recalled["notes"]] == [key]

            flagged = await ok(
                client,
                "flag_stale",
                {"key": key, "anchor": f"path:{prefix}src/db/", "observed_hash": "abc"},
            )
            assert flagged["version"] == 2
            await ok(client, "write", {"key": other, "value": "sqlite"})
            superseded = await ok(client, "supersede", {"key": key, "by": other})
            assert superseded["version"] == 3
            read = await ok(client, "read", {"key": key, "consistency": "bounded"})
            assert f"[STALE: path:{prefix}src/db/ changed" in read["rendered"]
            assert f"[SUPERSEDED by {other}]" in read["rendered"]

            revoked = await ok(client, "revoke", {"key": key, "reason": "wrong engine"})
            assert revoked["state"] == "revoked"
            again = await ok(client, "revoke", {"key": key, "reason": "wrong engine"})
            assert again["already"] is True
            reinstated = await ok(client, "reinstate", {"key": key, "reason": "right after all"})
            assert reinstated["state"] == "active"

            forgotten = await ok(client, "forget", {"key": key, "reason": "moved"})
            assert forgotten["state"] == "forgotten"
            assert len(forgotten["tombstone"]["id"]) == 32
            read = await ok(client, "read", {"key": key})
            assert read["state"] == "forgotten"
            assert "value" not in read
            assert read["rendered"].startswith(f"[{key}] [FORGOTTEN]")

            listed = await ok(client, "list", {"prefix": prefix})
            assert [item["key"] for item in listed["items"]] == [key, other]
            assert listed["next_after"] is None
            history = await ok(client, "history", {"key": key})
            kinds = [event["kind"] for event in history["events"]]
            assert kinds == [
                "written",
                "stale_flagged",
                "superseded",
                "revoked",
                "reinstated",
                "forgotten",
            ]
            probe = await ok(client, "probe", {"key": key})
            assert (probe["state"], probe["value_present"]) == ("forgotten", False)

            # Errors the model acts on are tool results, with the code and what to do.
            message = await refused(client, "write", {"key": key, "value": "postgres 17"})
            assert message.startswith("key_forgotten:")
            assert "clear_tombstone" in message
            message = await refused(client, "read", {"key": f"{prefix}never"})
            assert message.startswith("not_found:")
            message = await refused(
                client, "write", {"key": other, "value": 1, "expected_version": 9}
            )
            assert message.startswith("version_conflict:")
            assert "version 1" in message
            message = await refused(client, "recall", {"cues": ["nokind"]})
            assert message.startswith("invalid_request:")


async def test_a_stored_null_value_is_present_in_every_read(connect: Connect, prefix: str) -> None:
    """A value of JSON null is a value: read, recall and list carry `"value": null`, which
    a forgotten record (no value at all) does not."""
    key = f"{prefix}nothing"
    with anyio.fail_after(30):
        async with connect() as client:
            await ok(client, "write", {"key": key, "value": None, "anchors": [f"topic:{prefix}n"]})
            read = await ok(client, "read", {"key": key})
            recalled = await ok(client, "recall", {"cues": [f"topic:{prefix}n"]})
            listed = await ok(client, "list", {"prefix": key})
    assert "value" in read
    assert read["value"] is None
    [note] = recalled["notes"]
    assert "value" in note
    assert note["value"] is None
    [item] = listed["items"]
    assert "value" in item
    assert item["value"] is None


async def test_same_request_id_is_applied_once(connect: Connect, prefix: str) -> None:
    key = f"{prefix}once"
    arguments = {"key": key, "value": {"n": 1}, "request_id": f"{prefix}r1"}
    with anyio.fail_after(30):
        async with connect() as client:
            first = await ok(client, "write", arguments)
            second = await ok(client, "write", arguments)
            assert (first["replayed"], second["replayed"]) == (False, True)
            assert second["version"] == first["version"] == 1
            assert second["request_id"] == f"{prefix}r1"
            assert "replayed" in first_line_of_summary(await client.call_tool("write", arguments))
            history = await ok(client, "history", {"key": key})
            assert [event["kind"] for event in history["events"]] == ["written"]
            message = await refused(client, "write", {**arguments, "value": {"n": 2}})
            assert message.startswith("request_id_reused:")


def first_line_of_summary(result: object) -> str:
    """The summary line of a mutation (after any warnings)."""
    lines = text(result).splitlines()  # type: ignore[arg-type]
    return next(line for line in lines if " at version " in line)


async def test_actor_is_the_principal_never_an_argument(connect: Connect, prefix: str) -> None:
    key = f"{prefix}who"
    with anyio.fail_after(30):
        async with connect() as client:
            message = await refused(client, "write", {"key": key, "value": 1, "actor": "admin"})
            assert "actor" in message
            message = await refused(client, "forget", {"key": key, "reason": "r", "actor": "x"})
            assert "actor" in message
            # Nothing was applied by the refused calls.
            assert (await refused(client, "history", {"key": key})).startswith("not_found:")
            await ok(client, "write", {"key": key, "value": 1})
            await ok(client, "forget", {"key": key, "reason": "done"})
            history = await ok(client, "history", {"key": key})
            assert {event["actor"] for event in history["events"]} == {AGENT}
            read = await ok(client, "read", {"key": key})
            assert read["tombstone"]["actor"] == AGENT
            assert first_line(await client.call_tool("read", {"key": key})).startswith(
                f"[{key}] [FORGOTTEN]"
            )


async def test_expected_refusals_log_no_warning(
    cluster: LocalCluster, agent_token: str, prefix: str, tmp_path: Path
) -> None:
    """A refused write of a key never written (or of the key "") makes the server look for
    the key's revoked warning and find none: an expected outcome, logged at ``debug``, not
    as a warning (the server's log is its stderr)."""
    env = {
        "CAIRN_ENDPOINTS": ",".join(cluster.endpoints),
        "CAIRN_TOKEN": agent_token,
        "RUST_LOG": "cairn_mcp=debug",
    }
    log_path = tmp_path / "mcp.log"
    # The server's stderr into a file of this test's own.
    server = StdioServerParameters(
        command="/bin/sh",
        args=["-c", 'exec "$0" 2>"$1"', str(mcp_binary()), str(log_path)],
        env=env,
    )
    with anyio.fail_after(30):
        async with Client(server) as client:
            message = await refused(
                client, "write", {"key": f"{prefix}never", "value": 1, "expected_version": 3}
            )
            assert message.startswith("version_conflict:"), message
            message = await refused(client, "write", {"key": "", "value": 1})
            assert message.startswith("invalid_request:"), message
    log = log_path.read_text()
    assert "no revoked warning: the read was refused" in log, log
    assert " WARN " not in log, log
