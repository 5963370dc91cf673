"""The Responses API's `mcp` tool against real MCP servers written with the official SDK
(tests/mcpservers/tools_server.py: Streamable HTTP and SSE on free ports, stdio through --mcp-config),
with the official `openai` client. The bundled 135M model is steered with tool_choice (a named
MCP tool: the grammar makes the call) and max_tool_calls=1 (the next turn may not call, so it
answers); the tests check the items, events and guarantees, not the model's words."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import CTX_SIZE, Server, free_port

TOOLS_SERVER = Path(__file__).parent.parent / "mcpservers" / "tools_server.py"
SECRET = "sekrit-token-4711"
MAX_OUT = 64


class McpProcess:
    """tests/mcpservers/tools_server.py over `transport` on a free port."""

    def __init__(self, transport: str):
        self.port = free_port()
        path = "/sse" if transport == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        cmd = [sys.executable, str(TOOLS_SERVER), transport, str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert self.proc.poll() is None, "the MCP test server exited"
            time.sleep(0.1)
        raise RuntimeError("the MCP test server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[McpProcess]:
    p = McpProcess("http")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def mcp_sse() -> Iterator[McpProcess]:
    p = McpProcess("sse")
    yield p
    p.stop()


def stdio_config(folder: Path) -> Path:
    config = folder / "mcp.json"
    entry = {"command": sys.executable, "args": [str(TOOLS_SERVER), "stdio"], "env": {"TOOLS_SECRET": SECRET}}
    config.write_text(json.dumps({"mcpServers": {"local": entry, "off": {"command": "false", "disabled": True}}}))
    return config


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = stdio_config(tmp_path_factory.mktemp("mcp"))
    srv = Server(["--ctx-size", str(CTX_SIZE), "--parallel", "1", "--allow-mcp", "--allow-private-urls",
                  "--mcp-config", str(config), "--mcp-timeout", "20", "--mcp-max-output", "500", "--log-level", "info"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def model(client: OpenAI) -> str:
    return client.models.list().data[0].id


def remote(label: str, url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", **fields}


def forced(label: str, name: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "name": name}


def kinds(output: list[Any]) -> list[str]:
    return [o.type for o in output]


def check_call(call: Any, name: str, label: str) -> None:
    assert call.name == name and call.server_label == label and call.id.startswith("mcp_")
    json.loads(call.arguments)  # the grammar made them: valid JSON


def test_remote_server_lists_calls_and_answers(client: OpenAI, model: str, mcp_http: McpProcess, server: Server) -> None:
    tool = remote("calc", mcp_http.url, allowed_tools=["add"], headers={"X-Api-Key": SECRET})
    r = client.responses.create(
        model=model, input="What is 2 plus 3? Use the add tool.", tools=[tool], tool_choice=forced("calc", "add"),
        max_tool_calls=1, max_output_tokens=MAX_OUT, temperature=0,
    )
    assert kinds(r.output)[:2] == ["mcp_list_tools", "mcp_call"] and r.output[-1].type == "message"
    listing, call = r.output[0], r.output[1]
    assert [t.name for t in listing.tools] == ["add"] and listing.error is None  # allowed_tools
    check_call(call, "add", "calc")
    args = json.loads(call.arguments)
    assert call.error is None and call.output == str(args["a"] + args["b"]) and call.status == "completed"
    assert r.usage is not None and r.usage.output_tokens > 0
    # the header's value is in no log line and not in the stored response's echo of the tools
    stored = httpx.get(f"{server.url}/v1/responses/{r.id}").json()
    assert SECRET not in json.dumps(stored) and SECRET not in server.stderr_text()
    assert stored["tools"][0]["server_label"] == "calc"


def test_stdio_server_from_config_streamed(client: OpenAI, model: str) -> None:
    """Named by label only; the stream's events fold into the same items as the final response."""
    tool = {"type": "mcp", "server_label": "local", "require_approval": "never"}
    events = list(client.responses.create(
        model=model, input="Tell me the secret word.", tools=[tool], tool_choice=forced("local", "secret_word"),
        max_tool_calls=1, max_output_tokens=MAX_OUT, temperature=0, stream=True,
    ))
    types = [e.type for e in events]
    final = events[-1].response
    assert types[-1] in ("response.completed", "response.incomplete")
    order = ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed",
             "response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.completed"]
    assert [t for t in types if t in order] == order
    call = next(o for o in final.output if o.type == "mcp_call")
    check_call(call, "secret_word", "local")
    assert call.output == "pelican"
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.model_dump() for i in done] == [o.model_dump() for o in final.output]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output[-1].type == "message"


def test_listing_reused_from_previous_response(client: OpenAI, model: str, mcp_http: McpProcess) -> None:
    """A continuation reuses the listing of the response it continues, as OpenAI does."""
    tools = [remote("calc", mcp_http.url)]
    first = client.responses.create(model=model, input="Hello", tools=tools, tool_choice="none", max_output_tokens=8)
    assert kinds(first.output)[0] == "mcp_list_tools"
    again = client.responses.create(
        model=model, input="And now?", tools=tools, tool_choice="none", max_output_tokens=8, previous_response_id=first.id,
    )
    assert "mcp_list_tools" not in kinds(again.output)


def test_sse_transport(client: OpenAI, model: str, mcp_sse: McpProcess) -> None:
    r = client.responses.create(
        model=model, input="Add 1 and 1.", tools=[remote("old", mcp_sse.url)], tool_choice=forced("old", "add"),
        max_tool_calls=1, max_output_tokens=MAX_OUT, temperature=0,
    )
    call = next(o for o in r.output if o.type == "mcp_call")
    check_call(call, "add", "old")
    args = json.loads(call.arguments)
    assert call.output == str(args["a"] + args["b"])


def test_approval_round_trip(client: OpenAI, model: str, mcp_http: McpProcess) -> None:
    tool = remote("calc", mcp_http.url, require_approval="always")
    asked = client.responses.create(
        model=model, input="What is 4 plus 4?", tools=[tool], tool_choice=forced("calc", "add"), max_output_tokens=MAX_OUT,
    )
    assert kinds(asked.output) == ["mcp_list_tools", "mcp_approval_request"]
    request = asked.output[1]
    assert request.name == "add" and request.server_label == "calc" and json.loads(request.arguments)
    answered = client.responses.create(
        model=model, previous_response_id=asked.id, tools=[tool], tool_choice="none", max_output_tokens=MAX_OUT,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    assert kinds(answered.output)[0] == "mcp_call" and answered.output[-1].type == "message"
    call = answered.output[0]
    args = json.loads(request.arguments)
    assert call.approval_request_id == request.id and call.arguments == request.arguments
    assert call.output == str(args["a"] + args["b"])
    # refused: the call does not run, the model goes on
    refused = client.responses.create(
        model=model, previous_response_id=asked.id, tools=[tool], tool_choice="none", max_output_tokens=8,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False}],
    )
    assert "mcp_call" not in kinds(refused.output)


def test_tool_that_raises(client: OpenAI, model: str) -> None:
    tool = {"type": "mcp", "server_label": "local", "require_approval": "never"}
    r = client.responses.create(
        model=model, input="Call fail.", tools=[tool], tool_choice=forced("local", "fail"),
        max_tool_calls=1, max_output_tokens=MAX_OUT, temperature=0,
    )
    call = next(o for o in r.output if o.type == "mcp_call")
    assert call.status == "failed" and call.output is None
    assert call.error.type == "mcp_tool_execution_error"
    assert "failed on purpose" in json.dumps(call.error.content)
    assert r.status in ("completed", "incomplete") and r.output[-1].type == "message"


def test_server_down(client: OpenAI, model: str) -> None:
    gone = f"http://127.0.0.1:{free_port()}/mcp"
    # listing fails: a tool_choice that needs its tools is OpenAI's 424, never a 500
    r = httpx.post(f"{client.base_url}responses", timeout=120, json={
        "input": "Hi", "tools": [remote("gone", gone)], "tool_choice": "required", "max_output_tokens": 8,
    })
    assert r.status_code == 424 and "gone" in r.json()["error"]["message"]
    # listed earlier (the item sent back), down at call time: an mcp_call with its error
    listing = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "gone", "tools": [
        {"name": "add", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                          "required": ["a", "b"]}}]}
    r2 = client.responses.create(
        model=model, input=[listing, {"role": "user", "content": "Add 1 and 2."}], tools=[remote("gone", gone)],
        tool_choice=forced("gone", "add"), max_tool_calls=1, max_output_tokens=MAX_OUT, temperature=0,
    )
    call = next(o for o in r2.output if o.type == "mcp_call")
    assert call.status == "failed" and call.error.type == "http_error" and call.error.code == 502
    assert "mcp_list_tools" not in kinds(r2.output) and r2.output[-1].type == "message"


def test_unknown_label(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/responses", timeout=60, json={
        "input": "Hi", "tools": [{"type": "mcp", "server_label": "nowhere"}],
    })
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].server_label"
    assert "local" in r.json()["error"]["message"]


@pytest.fixture(scope="module")
def bare_server() -> Iterator[Server]:
    """No model (an upstream that is down) and no MCP flags: refusals come before any generation."""
    srv = Server(["--upstream", f"http://127.0.0.1:{free_port()}"], ready=(200, 503))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def public_only_server() -> Iterator[Server]:
    srv = Server(["--upstream", f"http://127.0.0.1:{free_port()}", "--allow-mcp"], ready=(200, 503))
    yield srv
    srv.stop()


def refusal(srv: Server, url: str) -> Any:
    from openai import BadRequestError

    c = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(BadRequestError) as info:
        c.responses.create(model="any", input="Hi", tools=[remote("calc", url)])
    return info.value


def test_refused_without_allow_mcp(bare_server: Server) -> None:
    err = refusal(bare_server, "https://mcp.example.com/mcp")
    body = err.body
    assert err.status_code == 400 and body["code"] == "mcp_not_allowed" and body["param"] == "tools[0].server_url"
    assert "--allow-mcp" in body["message"]


def test_private_address_refused(public_only_server: Server) -> None:
    for url in ("http://127.0.0.1:9/mcp", "http://localhost:9/mcp", "http://10.1.2.3/mcp", "http://[::1]:9/mcp"):
        err = refusal(public_only_server, url)
        assert err.body["code"] == "mcp_not_allowed" and "--allow-private-urls" in err.body["message"], url
