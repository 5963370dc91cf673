"""The pure parts of MCP: the `mcpServers` file, allowed_tools and require_approval, tool
results as text, and the MCP items of a Responses input as history."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from toolserve.api.responses.input import ResponsesRequest, chat_request
from toolserve.api.responses.mcp import is_allowed, needs_approval
from toolserve.api.responses.schemas import McpTool
from toolserve.config import ConfigError
from toolserve.mcp.client import ListedTool, capped, failure_of, result_text
from toolserve.mcp.config import parse_mcp_config, transport_of


def test_config_servers() -> None:
    servers = parse_mcp_config({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-filesystem", "/tmp"], "env": {"TOKEN": "t"}},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
        "legacy": {"url": "https://example.com/sse"},
        "typed": {"url": "https://example.com/events", "type": "sse"},
        "off": {"command": "x", "disabled": True},
    }})
    assert list(servers) == ["files", "docs", "legacy", "typed"]
    files = servers["files"]
    assert (files.transport, files.command, files.args, dict(files.env)) == ("stdio", "npx", ("-y", "server-filesystem", "/tmp"), {"TOKEN": "t"})
    assert servers["docs"].transport == "http" and servers["legacy"].transport == "sse" and servers["typed"].transport == "sse"
    assert all(s.from_config for s in servers.values())
    assert "Bearer" not in repr(servers["docs"]) and "TOKEN" not in repr(files)  # secrets stay out of logs
    assert parse_mcp_config({"servers": {"v": {"type": "http", "url": "http://h/mcp"}}})["v"].transport == "http"  # VS Code's key


@pytest.mark.parametrize("data, message", [
    ([], "expected a JSON object"),
    ({"other": {}}, "mcpServers"),
    ({"mcpServers": {"a": "npx"}}, "mcpServers.a: expected an object"),
    ({"mcpServers": {"a": {"args": []}}}, "mcpServers.a: expected 'command'"),
    ({"mcpServers": {"a": {"url": "ftp://h/x"}}}, "mcpServers.a: expected 'command'"),
    ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "mcpServers.a.args"),
    ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "mcpServers.a.env"),
    ({"mcpServers": {"a": {"url": "http://h/x", "type": "ws"}}}, "mcpServers.a.type"),
])
def test_config_refusals(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_mcp_config(data)


def test_transport_by_path() -> None:
    assert transport_of("https://h/mcp") == "http" and transport_of("https://h/v1/sse/") == "sse"
    assert transport_of("https://h/sse", "streamable-http") == "http"


ADD = ListedTool("add", None, {"type": "object"})
READ = ListedTool("read", None, {"type": "object"}, {"readOnlyHint": True})


def mcp(**fields: Any) -> McpTool:
    return McpTool(type="mcp", server_label="s", **fields)


@pytest.mark.parametrize("allowed, want", [
    (None, {"add", "read"}),
    (["add"], {"add"}),
    ({"tool_names": ["read"]}, {"read"}),
    ({"read_only": True}, {"read"}),
    ({"tool_names": ["add"], "read_only": True}, {"add", "read"}),
    ({}, {"add", "read"}),
])
def test_allowed_tools(allowed: Any, want: set[str]) -> None:
    assert {t.name for t in (ADD, READ) if is_allowed(mcp(allowed_tools=allowed), t)} == want


@pytest.mark.parametrize("rule, want", [
    (None, {"add", "read"}),  # OpenAI's default: ask
    ("always", {"add", "read"}),
    ("never", set()),
    ({"never": {"tool_names": ["add"]}}, {"read"}),
    ({"never": {"read_only": True}}, {"add"}),
    ({"always": {"tool_names": ["add"]}}, {"add", "read"}),
])
def test_require_approval(rule: Any, want: set[str]) -> None:
    assert {t.name for t in (ADD, READ) if needs_approval(mcp(require_approval=rule), t)} == want


def test_result_text_and_cap() -> None:
    from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents

    blocks = [TextContent(type="text", text="one"), ImageContent(type="image", data="AA==", mime_type="image/png"),
              EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a", text="two"))]
    assert result_text(blocks, None) == "one\n[image (image/png)]\ntwo"
    assert result_text([], {"result": 3}) == '{"result": 3}'
    assert capped("abcdef", 4) == "abcd\n[output cut: 2 more characters]" and capped("abc", 4) == "abc"


def test_failures_name_no_url() -> None:
    import httpx2

    group = getattr(builtins, "ExceptionGroup", None) or pytest.importorskip("exceptiongroup").ExceptionGroup
    url = "https://h.example/mcp?key=SECRET"
    request = httpx2.Request("POST", url)
    status = httpx2.HTTPStatusError("401", request=request, response=httpx2.Response(401, request=request))
    for exc, kind, code in [
        (group("g", [httpx2.ConnectError(f"failed {url}", request=request)]), "http_error", 502),  # as anyio raises it
        (status, "http_error", 401),
        (TimeoutError(), "http_error", 504),
    ]:
        failure = failure_of(exc, "docs", 5)
        assert (failure.kind, failure.code) == (kind, code) and "SECRET" not in failure.message and "docs" in failure.message


def test_mcp_items_in_input_are_history() -> None:
    """An mcp_call sent back is a call and its result; an approval response leaves a tool
    message for its call's result; a listing sent back is no message."""
    body = {"input": [
        {"role": "user", "content": "Add."},
        {"type": "mcp_list_tools", "id": "l1", "server_label": "s", "tools": [{"name": "add", "input_schema": {}}]},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "add", "arguments": '{"a": 1}', "output": "1"},
        {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
    ]}
    neutral, names, _ = chat_request(ResponsesRequest(**body))
    roles = [(m.role, m.tool_call_id or (m.tool_calls[0].id if m.tool_calls else None)) for m in neutral.messages]
    assert roles == [("user", None), ("assistant", "mcp_1"), ("tool", "mcp_1"), ("assistant", "mcpr_1"), ("tool", "mcpr_1")]
    assert neutral.messages[2].content == "1"
    assert [(a.request_id, a.approve, a.at) for a in names.approvals] == [("mcpr_1", True, 4)]
    assert list(names.approval_requests) == ["mcpr_1"]
