"""`--mcp-config FILE`: the `mcpServers` JSON that Claude Desktop, Cursor and LM Studio use.

```json
{"mcpServers": {
  "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "env": {}},
  "docs":  {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ..."}}
}}
```

An entry with `command` is a stdio server (started by toolserve, never by a request); one with
`url` is a remote server, spoken to over Streamable HTTP, or SSE when its `type` (or
`transport`) says `sse` or its path ends in `/sse`. `"disabled": true` leaves an entry out.
VS Code's `servers` key is read too. Pure: no network, no process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolserve.config import ConfigError

TRANSPORTS = {"http": "http", "streamable-http": "http", "streamable_http": "http", "streamablehttp": "http", "sse": "sse", "stdio": "stdio"}


@dataclass(frozen=True)
class McpServer:
    """One MCP server: a remote URL (`http` or `sse`) or a command (`stdio`). Its headers and
    environment may hold secrets: they are left out of its repr, so no log line shows them."""

    label: str
    transport: str  # http | sse | stdio
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    from_config: bool = False  # the operator's file, not a request: trusted for any address


def transport_of(url: str, declared: str | None = None) -> str:
    """`http` (Streamable HTTP) or `sse`: as declared, else by the path (`.../sse` is SSE)."""
    if declared:
        return TRANSPORTS[declared.lower()]
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{where}: expected an object of strings")
    return dict(value)


def parse_entry(label: str, entry: Any, where: str) -> McpServer | None:
    """One entry of `mcpServers`; None when it is disabled."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object with 'command' or 'url'")
    if entry.get("disabled") is True:
        return None
    declared = entry.get("type", entry.get("transport"))
    if declared is not None and (not isinstance(declared, str) or declared.lower() not in TRANSPORTS):
        raise ConfigError(f"{where}.type: {declared!r} is not one of stdio, http, streamable-http, sse")
    if "command" in entry:
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"{where}.command: expected the program to run")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{where}.args: expected a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"{where}.cwd: expected a folder")
        return McpServer(label, "stdio", command=command, args=tuple(args), env=_strings(entry.get("env"), f"{where}.env"),
                         cwd=cwd, from_config=True)
    url = entry.get("url", entry.get("serverUrl"))
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise ConfigError(f"{where}: expected 'command' (a stdio server) or 'url' (http or https)")
    transport = transport_of(url, declared if declared and declared.lower() != "stdio" else None)
    return McpServer(label, transport, url=url, headers=_strings(entry.get("headers"), f"{where}.headers"), from_config=True)


def parse_mcp_config(data: Any, where: str = "mcp config") -> dict[str, McpServer]:
    """The servers of an `mcpServers` document, by label."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object with 'mcpServers'")
    servers = data.get("mcpServers", data.get("servers"))
    if not isinstance(servers, dict):
        raise ConfigError(f"{where}: expected an object 'mcpServers' (name -> server)")
    out: dict[str, McpServer] = {}
    for label, entry in servers.items():
        if not label.strip():
            raise ConfigError(f"{where}: a server has an empty name")
        server = parse_entry(label, entry, f"{where}: mcpServers.{label}")
        if server is not None:
            out[label] = server
    return out


def load_mcp_config(path: str) -> dict[str, McpServer]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--mcp-config {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--mcp-config {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_mcp_config(data, f"--mcp-config {path}")
