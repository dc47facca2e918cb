"""Messages the server cannot decode (nested too deep, too long, not JSON-RPC, an object
naming a member twice) are answered over both transports, so no caller waits forever, and
nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any

import pytest
from cairn_client import Cairn, NotFound
from cairn_client.testing import LocalCluster

from mcp_e2e import Connect, mcp_binary, ok, refused

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

# serde_json decodes 127 levels; a tools/call spends three before the value.
VALUE_DEPTH_MAX = 124
# The node stores values nested at most this deep (so list and recall pages decode).
STORED_DEPTH_MAX = 120


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_a_tool_call_too_deep_or_too_long_is_a_tool_error(
    connect: Connect, prefix: str
) -> None:
    async with connect() as client:
        deepest = await ok(
            client, "write", {"key": f"{prefix}deep", "value": nested(STORED_DEPTH_MAX)}
        )
        assert deepest["version"] == 1
        over_the_nodes_limit = await refused(
            client, "write", {"key": f"{prefix}deeper", "value": nested(VALUE_DEPTH_MAX)}
        )
        assert over_the_nodes_limit.startswith("invalid_request: value: nests 124 levels"), (
            over_the_nodes_limit
        )
        too_deep = await refused(
            client, "write", {"key": f"{prefix}deeper", "value": nested(VALUE_DEPTH_MAX + 1)}
        )
        assert too_deep.startswith("invalid_request: message: nested 128 levels deep"), too_deep
        assert f"nests at most {VALUE_DEPTH_MAX} levels" in too_deep
        too_long = await refused(
            client, "write", {"key": f"{prefix}long", "value": "x" * (17 << 20)}
        )
        assert too_long.startswith("too_large: message: "), too_long[:200]
        listed = await ok(client, "list", {"prefix": prefix})
        assert [item["key"] for item in listed["items"]] == [f"{prefix}deep"]


def test_stdio_answers_lines_that_are_not_json_rpc(cluster: LocalCluster, agent_token: str) -> None:
    env = {
        "CAIRN_ENDPOINTS": ",".join(cluster.endpoints),
        "CAIRN_TOKEN": agent_token,
        "RUST_LOG": "error",
        "PATH": os.environ.get("PATH", ""),
    }
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    raw = [json.dumps(line) for line in lines]
    raw.append("not json at all")
    raw.append('{"jsonrpc":"2.0","id":"broken","method":"tools/list","params":')
    # serde_json would keep the last of two members of one name: the message is refused.
    key = f"framing/repeated-{uuid.uuid4().hex}"
    for id_, arguments in [
        ("repeated-in-value", f'{{"key":"{key}","value":{{"a":1,"a":2}}}}'),
        ("repeated-argument", f'{{"key":"{key}","value":1,"value":2}}'),
    ]:
        raw.append(
            f'{{"jsonrpc":"2.0","id":"{id_}","method":"tools/call",'
            f'"params":{{"name":"write","arguments":{arguments}}}}}'
        )
    # Params that do not fit a method the server serves: bad params, not "method not found".
    raw.append(
        '{"jsonrpc":"2.0","id":"bad-arguments","method":"tools/call",'
        '"params":{"name":"read","arguments":"x"}}'
    )
    raw.append('{"jsonrpc":"2.0","id":"bad-uri","method":"resources/read","params":{"uri":5}}')
    raw.append(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    server = subprocess.Popen(
        [str(mcp_binary())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        server.stdin.write("\n".join(raw) + "\n")
        server.stdin.flush()
        by_id: dict[str, Any] = {}
        expected = {
            "null",
            '"broken"',
            '"repeated-in-value"',
            '"repeated-argument"',
            '"bad-arguments"',
            '"bad-uri"',
            "2",
        }
        while not expected <= by_id.keys():  # the test's timeout bounds this wait
            answer = json.loads(server.stdout.readline())
            by_id[json.dumps(answer.get("id"))] = answer
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        server.stdout.close()
    assert by_id["null"]["error"]["code"] == -32700, by_id
    assert by_id['"broken"']["error"]["code"] == -32700, by_id
    assert "not a JSON-RPC message" in by_id['"broken"']["error"]["message"]
    for id_, member in [("repeated-in-value", "a"), ("repeated-argument", "value")]:
        result = by_id[f'"{id_}"']["result"]
        assert result["isError"] is True, result
        text = result["content"][0]["text"]
        assert text.startswith(f"invalid_request: message: duplicate field `{member}`"), text
    bad_arguments = by_id['"bad-arguments"']["result"]
    assert bad_arguments["isError"] is True, bad_arguments
    assert bad_arguments["content"][0]["text"].startswith("invalid_request: params of tools/call")
    assert by_id['"bad-uri"']["error"]["code"] == -32602, by_id['"bad-uri"']
    with Cairn(cluster.endpoints, token=agent_token) as cairn, pytest.raises(NotFound):
        cairn.read(key)
    assert len(by_id["2"]["result"]["tools"]) == 11, "the session goes on after them all"
