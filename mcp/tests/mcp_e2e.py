"""What the MCP end-to-end tests share: the agent principal's name, the connection type,
and readers of tool results."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp import Client
from mcp_types import CallToolResult, TextContent

# The principal the tests' MCP sessions act as.
AGENT = "mcp-agent"

# Opens an MCP session (see the `connect` fixture).
Connect = Callable[[], AbstractAsyncContextManager[Client]]


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
