"""The transcript in docs/mcp.md, replayed: every ``>>>`` line of its block runs against a
fresh auth-on cluster through the official SDK, as the principal the page names, and prints
in the page's form. What it prints must be what the page shows, times and generated
``request_id``s aside, so the page cannot drift from the server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cairn_client import Cairn
from cairn_client.testing import LocalCluster
from mcp import Client
from mcp_types import TextContent, TextResourceContents

from mcp_e2e import stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
# The principal the page's transcript acts as, and its grant.
PRINCIPAL = "planner"
PERMISSIONS = ["read", "write", "forget", "revoke"]
# How many characters of each resource content the page prints.
CONTENT_SHOWN = 160
_MASKS = (
    (re.compile(r"\b[0-9a-f]{32}\b"), "<request_id>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\b1\d{12}\b"), "<ms>"),
)


def _transcript() -> list[tuple[str, list[str]]]:
    """The page's ``>>>`` lines, each with the lines it printed."""
    text = PAGE.read_text().split("\n## Transcript\n", 1)[1]
    block = text.split("```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith(">>> "):
            steps.append((line.removeprefix(">>> "), []))
        else:
            steps[-1][1].append(line)
    return steps


def _mask(lines: list[str]) -> list[str]:
    return [_mask_line(line) for line in lines]


def _mask_line(line: str) -> str:
    for pattern, replacement in _MASKS:
        line = pattern.sub(replacement, line)
    return line


async def _replay(client: Client, step: str) -> list[str]:
    """What the page prints for ``step``: the tools and their hints, a call's ``isError``
    and first text block, or the start of each content of a resource."""
    if step.startswith("connected: "):
        info = client.server_info
        assert info is not None
        return [f"connected: {info.name} {info.version}, protocol {client.protocol_version}"]
    if step == "tools/list":
        printed = []
        for tool in sorted((await client.list_tools()).tools, key=lambda t: t.name):
            hints = tool.annotations
            assert hints is not None, tool.name
            printed.append(
                f"  {tool.name:<11} readOnly={hints.read_only_hint} "
                f"destructive={hints.destructive_hint} idempotent={hints.idempotent_hint} "
                f"openWorld={hints.open_world_hint}"
            )
        return printed
    if step.startswith("tools/call "):
        name, arguments = step.removeprefix("tools/call ").split(" ", 1)
        result = await client.call_tool(name, json.loads(arguments))
        block = result.content[0]
        assert isinstance(block, TextContent), block
        return [f"  isError={result.is_error}"] + [
            f"  | {line}" for line in block.text.splitlines()
        ]
    if step.startswith("resources/read "):
        contents = (await client.read_resource(step.removeprefix("resources/read "))).contents
        assert all(isinstance(c, TextResourceContents) for c in contents)
        return [
            f"  {content.mime_type}: {content.text[:CONTENT_SHOWN]}"  # type: ignore[union-attr]
            for content in contents
        ]
    raise AssertionError(f"docs/mcp.md: a transcript step this test cannot replay: {step}")


async def test_the_pages_transcript_prints_what_it_shows() -> None:
    steps = _transcript()
    assert len(steps) > 10, "the transcript block was not found"
    differences = []
    with LocalCluster(3, auth=True) as cluster:
        with Cairn(cluster.endpoints, token=cluster.admin_token) as admin:
            grant = {"prefix": "", "permissions": PERMISSIONS}
            token = admin.create_principal(PRINCIPAL, [grant]).token
        async with stdio_client(cluster, token) as client:
            for step, shown in steps:
                printed = await _replay(client, step)
                # "connected: ..." is its own output.
                expected = [step] if step.startswith("connected: ") else shown
                if _mask(expected) != _mask(printed):
                    page, ran = "\n".join(expected), "\n".join(printed)
                    differences.append(f">>> {step}\n--- page\n{page}\n--- ran\n{ran}")
    assert not differences, f"{len(differences)} steps differ:\n\n" + "\n\n".join(differences)
