"""An MCP server written with the official SDK, for the tests: a few tools over stdio,
Streamable HTTP or SSE.

    python tests/mcpservers/tools_server.py stdio
    python tests/mcpservers/tools_server.py http PORT
    python tests/mcpservers/tools_server.py sse PORT
"""

from __future__ import annotations

import sys

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("toolserve test tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail() -> str:
    """A tool that always fails."""
    raise ToolError("failed on purpose")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def secret_word() -> str:
    """The secret word of the day."""
    return "pelican"


@server.tool()
def big_output(size: int) -> str:
    """A long text of `size` characters."""
    return "x" * size


if __name__ == "__main__":
    transport = sys.argv[1]
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("sse" if transport == "sse" else "streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
