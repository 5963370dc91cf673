"""The Responses API's `mcp` tool: which servers a request may reach, their tools as the
model's functions, approvals, and running the calls the model makes.

A request's `mcp` tool names a server by `server_url` (only with `--allow-mcp`; a private or
loopback address only with `--allow-private-urls` too) or, without a URL, a server of
`--mcp-config` by its label (stdio servers start only from there). Each server's tools are
listed once per conversation: an `mcp_list_tools` item of the previous responses (or sent back
in the input) is reused, as OpenAI does. The tools that `allowed_tools` lets through are
offered to the model as functions, in its family's syntax like any other; a call to one runs
on the server (`mcp_call` item), or, where `require_approval` asks for it (OpenAI's default),
ends the response with an `mcp_approval_request` that a later `mcp_approval_response` answers.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request

from toolserve.api.responses.input import NAMESPACE_SEP, McpName, ToolNames
from toolserve.api.responses.output import new_id
from toolserve.api.responses.schemas import (
    CustomTool,
    FunctionTool,
    McpChoice,
    McpListToolsItem,
    McpTool,
    NamespaceTool,
    ResponsesRequest,
    ToolFilter,
)
from toolserve.errors import InvalidRequest, ToolserveError, Unsupported
from toolserve.mcp.client import CallResult, ListedTool, McpClients, McpFailure
from toolserve.mcp.config import McpServer, transport_of
from toolserve.serving.media import is_public_host
from toolserve.types import ToolSpec

Json = dict[str, Any]
router = APIRouter()
MAX_TURNS = 8  # generations in one response: the last one may not call an MCP tool, so it answers
DENIED = "The user did not approve this call, so it did not run."


class McpRefused(InvalidRequest):
    code = "mcp_not_allowed"


class McpListFailed(ToolserveError):
    """A server that could not list its tools, when the request cannot go on without them
    (tool_choice asks for one of them): OpenAI's 424."""

    status = 424
    type = "external_connector_error"
    code = "mcp_list_tools_failed"


def _matches(f: ToolFilter, tool: ListedTool) -> bool:
    by_name = f.tool_names is not None and tool.name in f.tool_names
    return by_name or (f.read_only is True and bool((tool.annotations or {}).get("readOnlyHint")))


def is_allowed(param: McpTool, tool: ListedTool) -> bool:
    allowed = param.allowed_tools
    if allowed is None:
        return True
    if isinstance(allowed, list):
        return tool.name in allowed
    return (allowed.tool_names is None and allowed.read_only is None) or _matches(allowed, tool)


def needs_approval(param: McpTool, tool: ListedTool) -> bool:
    """`require_approval`: never, always, or per tool; OpenAI's default is to ask."""
    rule = param.require_approval
    if rule is None or rule == "always":
        return True
    if rule == "never":
        return False
    # a tool in neither list is asked about, as OpenAI does
    return rule.never is None or not _matches(rule.never, tool)


async def resolve_server(param: McpTool, where: str, clients: McpClients) -> McpServer:
    """The server a request's `mcp` tool names, checked against the server's flags."""
    policy = clients.policy
    if param.server_url is None:
        if param.connector_id is not None:
            raise Unsupported(f"{where}: connectors are OpenAI's; give 'server_url' or name a server of --mcp-config.", param=where)
        server = clients.servers.get(param.server_label)
        if server is None:
            known = ", ".join(sorted(clients.servers)) or "none: the server runs without --mcp-config"
            raise InvalidRequest(f"{where}: no MCP server is named '{param.server_label[:100]}' in --mcp-config "
                                 f"(configured: {known[:500]}); give 'server_url' for another.", param=f"{where}.server_label")
        return server
    at = f"{where}.server_url"
    if not policy.allow_urls:
        raise McpRefused(f"{at}: this server connects to MCP servers named by URL only when started with --allow-mcp.", param=at)
    parts = urlsplit(param.server_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"{at}: expected an http or https URL.", param=at)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if not policy.allow_private and not await asyncio.to_thread(is_public_host, parts.hostname, port):
        raise McpRefused(f"{at}: the URL points to a private or local address; this server connects to those only "
                         "with --allow-private-urls.", param=at)
    headers = dict(param.headers or {})
    if param.authorization:
        headers["Authorization"] = f"Bearer {param.authorization}"
    return McpServer(param.server_label, transport_of(param.server_url), url=param.server_url, headers=headers)


def list_item(label: str, tools: list[ListedTool] | None, error: str | None = None) -> Json:
    return {"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": label,
            "tools": [t.as_json() for t in tools or []], "error": error}


def _listed(item: Json | McpListToolsItem) -> list[ListedTool] | None:
    """The tools of a stored or sent-back listing; None when that listing failed."""
    data = item.model_dump() if isinstance(item, McpListToolsItem) else item
    if data.get("error"):
        return None
    return [ListedTool(t["name"], t.get("description"), t.get("input_schema") or {}, t.get("annotations")) for t in data["tools"]]


@dataclass
class Server:
    """One `mcp` tool of the request: its server, the tool's settings, and the tools listed."""

    server: McpServer
    param: McpTool
    tools: list[ListedTool] | None = None  # None: the listing failed


class McpRun:
    """The MCP side of one response: the servers, the listings made now (output items), the
    listings known to the conversation (stored with the response) and the calls' runner."""

    def __init__(self, clients: McpClients, servers: dict[str, Server], known: dict[str, Json]):
        self.clients = clients
        self.servers = servers
        self.known = known  # label -> the mcp_list_tools item in use
        self.new_items: list[Json] = []  # listings and approved calls made before the first generation
        self.failed: list[str] = []

    @classmethod
    async def prepare(cls, req: ResponsesRequest, clients: McpClients | None, lists: dict[str, Json]) -> McpRun | None:
        """The request's MCP servers, each listed unless `lists` (the conversation's listings)
        or an `mcp_list_tools` item of the input has it already."""
        params = [(i, t) for i, t in enumerate(req.tools or []) if isinstance(t, McpTool)]
        if not params:
            return None
        if clients is None:
            raise McpRefused("tools holds an 'mcp' tool, but this server runs no MCP client.", param="tools")
        known = dict(lists)
        for item in req.input if isinstance(req.input, list) else []:
            if isinstance(item, McpListToolsItem):
                known[item.server_label] = item.model_dump()
        servers: dict[str, Server] = {}
        for i, param in params:
            if param.server_label in servers:
                raise InvalidRequest(f"tools[{i}]: two mcp tools have the server_label '{param.server_label[:100]}'.", param=f"tools[{i}].server_label")
            servers[param.server_label] = Server(await resolve_server(param, f"tools[{i}]", clients), param)
        run = cls(clients, servers, known)
        await asyncio.gather(*(run._list(s) for s in servers.values()))
        return run

    async def _list(self, s: Server) -> None:
        label = s.server.label
        stored = self.known.get(label)
        if stored is not None and (tools := _listed(stored)) is not None:
            s.tools = [t for t in tools if is_allowed(s.param, t)]
            return
        try:
            listed = await self.clients.list_tools(s.server)
        except McpFailure as exc:
            self.failed.append(exc.message)
            self.new_items.append(list_item(label, None, exc.message))
            return
        s.tools = [t for t in listed if is_allowed(s.param, t)]
        item = list_item(label, s.tools)
        self.known[label] = item
        self.new_items.append(item)

    def offer(self, names: ToolNames, taken: set[str]) -> tuple[ToolSpec, ...]:
        """The servers' tools as functions; a name already taken gets its server's label in front."""
        out = []
        for s in self.servers.values():
            for t in s.tools or []:
                flat = t.name if t.name not in taken else f"{s.server.label}{NAMESPACE_SEP}{t.name}"
                taken.add(flat)
                names.mcp[flat] = McpName(s.server.label, t.name, needs_approval(s.param, t))
                schema = t.input_schema if t.input_schema.get("type") == "object" else {"type": "object", "properties": {}}
                out.append(ToolSpec(name=flat, description=t.description or "", parameters=schema))
        return tuple(out)

    def check_choice(self, names: ToolNames, choice: Any, other_tools: bool) -> None:
        """A tool_choice that needs a tool no server could list: OpenAI's 424, with the reason."""
        if not self.failed or names.mcp:
            return
        if isinstance(choice, McpChoice) or (choice == "required" and not other_tools):
            raise McpListFailed("Error retrieving tool list from MCP server: " + "; ".join(self.failed))

    async def call(self, label: str, name: str, arguments: str) -> CallResult:
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            error = {"type": "mcp_protocol_error", "code": -32602, "message": "the arguments are not a JSON object"}
            return CallResult(None, error, "Error: the arguments are not a JSON object.")
        return await self.clients.call_tool(self.servers[label].server, name, args)

    async def answer(self, names: ToolNames, pending: dict[str, Json]) -> list[tuple[int, str, Json | None]]:
        """The input's approval responses: each approved call runs now. For each, the index of
        its tool message, the text the model reads, and the `mcp_call` item (None if refused)."""
        out: list[tuple[int, str, Json | None]] = []
        for a in names.approvals:
            sent = names.approval_requests.get(a.request_id)
            asked = sent.model_dump() if sent is not None else pending.get(a.request_id)
            if asked is None:
                raise InvalidRequest(f"No mcp_approval_request with id '{a.request_id[:100]}' is in the input or the "
                                     "previous response.", param="input")
            label = asked["server_label"]
            if label not in self.servers:
                raise InvalidRequest(f"The approved call is to the MCP server '{label[:100]}': tools must hold its mcp tool.", param="tools")
            if not a.approve:
                out.append((a.at, DENIED, None))
                continue
            result = await self.call(label, asked["name"], asked["arguments"])
            item = {"id": new_id("mcp"), "type": "mcp_call", "status": "completed" if result.error is None else "failed",
                    "approval_request_id": a.request_id, "server_label": label, "name": asked["name"],
                    "arguments": asked["arguments"], "output": result.output, "error": result.error}
            out.append((a.at, result.text, item))
            self.new_items.append(item)
        return out


def taken_names(req: ResponsesRequest) -> set[str]:
    """The names the request's own tools take (functions, custom tools, namespaced functions)."""
    out: set[str] = set()
    for t in req.tools or []:
        if isinstance(t, NamespaceTool):
            out |= {f"{t.name}{NAMESPACE_SEP}{inner.name}" for inner in t.tools if isinstance(inner, FunctionTool)}
        elif isinstance(t, FunctionTool | CustomTool):
            out.add(t.name)
    return out


@router.get("/v1/mcp/servers")
async def list_servers(request: Request) -> Json:
    """The servers of --mcp-config, for the chat page (a request names them by label)."""
    clients: McpClients = request.app.state.mcp
    data = [{"server_label": s.label, "transport": s.transport} for s in clients.servers.values()]
    return {"object": "list", "data": data, "allow_urls": clients.policy.allow_urls}
