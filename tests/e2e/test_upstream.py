"""toolserve in front of other OpenAI-compatible servers, all of them real processes: a second
toolserve on the bundled model, llama-cpp-python's own server, and a small asyncio HTTP server
that fails on purpose (5xx, a stream that stalls). Passthrough and raw modes, streaming and not,
tool calls, errors forwarded, timeouts, an upstream that is down and comes back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from openai import OpenAI

from tests.conftest import Server, ServerProcess, free_port
from tests.e2e.test_load import NO_EOS, wait_idle
from tests.e2e.test_tools import SCHEMAS, WEATHER, assert_valid_calls, both
from tests.stub_http import StubHttp
from toolserve.engine.repack import check_repack
from toolserve.models.files import bundled_model

ASK = [{"role": "user", "content": "What's the weather like in Paris today?"}]
HI = [{"role": "user", "content": "Name three colours."}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
LONG = [{"role": "user", "content": "word " * 3000}]  # more than a 2048-token context


def client_of(srv: Any) -> OpenAI:
    return OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)


def error_of(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]  # type: ignore[no-any-return]


def sse_events(url: str, body: dict[str, Any], timeout: float = 120) -> list[dict[str, Any]]:
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


# llama-cpp-python's server has no --no-repack: on a host where toolserve's check finds repacked
# kernels faulting, it runs with the default model parameters' repacking turned off.
NO_REPACK_SERVER = (
    "import runpy, llama_cpp.llama_cpp as c\n"
    "default = c.llama_model_default_params\n"
    "def no_repack():\n    p = default(); p.use_extra_bufts = False; return p\n"
    "c.llama_model_default_params = no_repack\n"
    "runpy.run_module('llama_cpp.server', run_name='__main__')\n"
)


def llama_cpp_server(repack: bool) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server"] if repack else [sys.executable, "-c", NO_REPACK_SERVER]


class LlamaCppServer(ServerProcess):
    """`python -m llama_cpp.server` on the bundled GGUF."""

    def __init__(self, repack: bool | None = None) -> None:
        port = free_port()
        if repack is None:
            repack = check_repack(str(bundled_model())).works
        cmd = [*llama_cpp_server(repack), "--model", str(bundled_model()), "--n_ctx", "2048",
               "--host", "127.0.0.1", "--port", str(port), "--verbose", "false",
               # by default it cuts a running stream short when another request arrives
               "--interrupt_requests", "false"]
        super().__init__(cmd, port, ready_path="/v1/models")


class Misbehaving(StubHttp):
    """A real HTTP server that fails the way upstreams do. GET /health and /v1/models answer;
    POST answers per `mode`: 'error' a 500 with an OpenAI error body, 'stall' the headers and one
    SSE chunk, then nothing."""

    def __init__(self) -> None:
        self.mode = "error"
        self.root: str | None = None  # listed as the model's `root`, as vLLM lists where it loaded it from
        self.prompts: list[str] = []  # the completions' prompts, as raw mode rendered them
        super().__init__()

    @classmethod
    def _surrogate_answer(cls, stream: bool) -> bytes:
        head = {"id": "x", "created": 0, "model": "broken"}
        if not stream:
            message = {"role": "assistant", "content": "Hel\ud800lo"}
            whole = {**head, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            return cls.reply("200 OK", json.dumps(whole).encode())
        out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        for delta, finish in (({"role": "assistant", "content": "Hel\ud800"}, None), ({"content": "lo"}, "stop")):
            chunk = {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
        return out + b"data: [DONE]\n\n"

    async def respond(self, method: str, path: str, body: Any, writer: asyncio.StreamWriter) -> None:
        if method == "GET" and path == "/health":
            writer.write(self.reply("200 OK", b"{}"))
        elif method == "GET" and path == "/v1/models":
            model = {"id": "broken", "object": "model", **({"root": self.root} if self.root else {})}
            writer.write(self.reply("200 OK", json.dumps({"object": "list", "data": [model]}).encode()))
        elif self.mode in ("xgrammar", "bound") and path == "/v1/completions":  # vLLM with a backend that cannot read Lark
            self.prompts.append(body.get("prompt"))
            if isinstance(body.get("structured_outputs"), dict) and "grammar" in body["structured_outputs"]:
                if self.mode == "xgrammar":  # started with --structured-outputs-config.backend xgrammar: refused up front
                    err = {"error": {"message": "Invalid grammar specification.", "type": "BadRequestError", "param": None, "code": 400}}
                    writer.write(self.reply("400 Bad Request", json.dumps(err).encode()))
                else:  # 'auto', whose engine an earlier request bound to xgrammar: it fails compiling
                    err = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}}
                    writer.write(self.reply("500 Internal Server Error", json.dumps(err).encode()))
            else:
                chunk = {"id": "x", "object": "text_completion", "created": 0, "model": "broken",
                         "choices": [{"index": 0, "text": "Red.", "finish_reason": "stop"}]}
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        elif self.mode in ("xgrammar", "bound") and path == "/tokenize":
            writer.write(self.reply("404 Not Found", b'{"detail": "Not Found"}'))
        elif self.mode == "surrogate":  # a lone \ud800 escape in its text, as a buggy upstream may send
            writer.write(self._surrogate_answer(bool(body.get("stream"))))
        elif self.mode == "error":
            err = {"error": {"message": "the GPU caught fire", "type": "server_error", "param": None, "code": None}}
            writer.write(self.reply("500 Internal Server Error", json.dumps(err).encode()))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "broken",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}
            writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await writer.drain()
            await asyncio.sleep(60)


# ---- fixtures: upstreams and the fronts that use them ------------------------------------------


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaCppServer]:
    srv = LlamaCppServer()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def misbehaving() -> Iterator[Misbehaving]:
    srv = Misbehaving()
    yield srv
    srv.stop()


@contextlib.contextmanager
def front(args: list[str], env: dict[str, str] | None = None) -> Iterator[Server]:
    """A toolserve in front of an upstream (started even while the upstream is down)."""
    srv = Server(args, ready=(200, 503), env=env)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def passthrough(server: Server) -> Iterator[Server]:
    """Passthrough to toolserve; the upstream's model is found from its /v1/models."""
    with front(["--upstream", f"{server.url}/v1", "--model-alias", "front"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw_json(server: Server) -> Iterator[Server]:
    """Raw mode to toolserve's /v1/completions, generic_json calls enforced by its response_format."""
    with front(["--upstream", server.url, "--upstream-mode", "raw", "--tool-format", "generic_json", "--model-alias", "raw-json"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw_family(server: Server) -> Iterator[Server]:
    """Raw mode to toolserve's /v1/completions as to vLLM's: calls in a family's own syntax,
    held by the family's grammar sent as structured_outputs.grammar."""
    with front(["--upstream", server.url, "--upstream-mode", "raw", "--upstream-guided", "vllm", "--tool-format", "qwen3_coder",
                "--model-alias", "raw-qwen3"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def raw_pythonic(server: Server) -> Iterator[Server]:
    with front(["--upstream", server.url, "--upstream-mode", "raw", "--upstream-guided", "vllm", "--tool-format", "pythonic",
                "--model-alias", "raw-py"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def llama_pass(llama: LlamaCppServer) -> Iterator[Server]:
    with front(["--upstream", llama.url, "--model-alias", "pass-llama"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def llama_raw(llama: LlamaCppServer) -> Iterator[Server]:
    """Raw mode to llama-cpp-python, which has no guided decoding on completions."""
    with front(["--upstream", llama.url, "--upstream-mode", "raw", "--upstream-guided", "none", "--model-alias", "raw-llama"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def hasty(server: Server, model_id: str) -> Iterator[Server]:
    # 4 s: no flowing stream goes that long without a token, even on a busy 2-core machine
    with front(["--upstream", server.url, "--upstream-model", model_id, "--upstream-timeout", "4", "--model-alias", "hasty"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def broken(misbehaving: Misbehaving) -> Iterator[Server]:
    with front(["--upstream", misbehaving.url, "--upstream-timeout", "2", "--model-alias", "broken"]) as srv:
        yield srv


# ---- discovery -----------------------------------------------------------------------------------


def test_models_lists_the_upstream_model_under_our_id(passthrough: Server, model_id: str) -> None:
    data = httpx.get(f"{passthrough.url}/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["front"]
    card = data[0]
    assert card["max_model_len"] == 2048  # the upstream's own card
    ts = card["toolserve"]
    assert ts["backend"] == "upstream" and ts["mode"] == "passthrough"
    assert ts["upstream_model"] == model_id and ts["available"] is True and ts["loaded"] is True
    assert httpx.get(f"{passthrough.url}/v1/models/front").json()["id"] == "front"
    health = httpx.get(f"{passthrough.url}/health").json()
    assert health["status"] == "ok" and health["models"]["front"]["available"] is True


@pytest.mark.parametrize("level", ["info", "debug"])
def test_one_log_line_a_request_at_info(server: Server, level: str) -> None:
    """The access line says what a client asked; a line for each request toolserve sends
    upstream shows at --log-level debug only (httpx's for its health checks too)."""
    with front(["--upstream", f"{server.url}/v1", "--model-alias", "front", "--log-level", level]) as srv:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "front", "messages": HI, "max_tokens": 2})
        assert r.status_code == 200
        log = srv.stderr_text()
    assert "toolserve.access" in log and "POST /v1/chat/completions 200" in log
    assert ("upstream request: POST" in log) is (level == "debug")
    assert ("HTTP Request: GET" in log) is (level == "debug")  # the health check at start


def test_raw_card_names_template_and_format(raw_json: Server, llama_raw: Server) -> None:
    ts = httpx.get(f"{raw_json.url}/v1/models").json()["data"][0]["toolserve"]
    assert (ts["mode"], ts["tool_format"], ts["chat_template"], ts["guided"]) == ("raw", "generic_json", "bundled:chatml", "openai")
    ts = httpx.get(f"{llama_raw.url}/v1/models").json()["data"][0]["toolserve"]
    assert (ts["mode"], ts["tool_format"], ts["guided"]) == ("raw", "hermes", "none")


# ---- passthrough ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 7}])
def test_passthrough_stream_equals_non_stream_and_the_upstream(passthrough: Server, server: Server, model_id: str, sampling: dict[str, Any]) -> None:
    kw = {"messages": HI, "max_tokens": 24, **sampling}
    whole = both(client_of(passthrough), model="front", **kw)
    direct = client_of(server).chat.completions.create(model=model_id, **kw)
    assert whole["content"] == direct.choices[0].message.content  # forwarded as it is
    r = client_of(passthrough).chat.completions.create(model="front", **kw)
    assert r.model == "front"
    events = sse_events(f"{passthrough.url}/v1/chat/completions", {"model": "front", **kw})
    assert {e["model"] for e in events} == {"front"}


def test_passthrough_named_tool_call(passthrough: Server) -> None:
    m = both(client_of(passthrough), model="front", messages=ASK, tools=[WEATHER], tool_choice=NAMED, temperature=0.7, seed=3, max_tokens=80)
    assert_valid_calls(m, {"get_weather"})
    assert len(m["calls"]) == 1


def test_passthrough_completions_and_missing_model(passthrough: Server) -> None:
    c = client_of(passthrough)
    r = c.completions.create(model="front", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.model == "front" and r.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(model="front", prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if ch.choices)
    assert streamed == r.choices[0].text
    no_model = httpx.post(f"{passthrough.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 2}, timeout=60)
    assert no_model.status_code == 200 and no_model.json()["model"] == "front"
    unknown = httpx.post(f"{passthrough.url}/v1/chat/completions", json={"model": "nope", "messages": HI}, timeout=60)
    assert unknown.status_code == 404 and "'front'" in error_of(unknown)["message"]


def test_passthrough_to_llama_cpp_server(llama_pass: Server) -> None:
    c = client_of(llama_pass)
    r = c.chat.completions.create(model="pass-llama", messages=HI, max_tokens=16, temperature=0)
    assert r.model == "pass-llama" and r.choices[0].message.content
    chunks = list(c.chat.completions.create(model="pass-llama", messages=HI, max_tokens=16, temperature=0, stream=True))
    assert {ch.model for ch in chunks} == {"pass-llama"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] in (["length"], ["stop"])


# ---- raw -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 11}])
def test_raw_stream_equals_non_stream(raw_json: Server, sampling: dict[str, Any]) -> None:
    m = both(client_of(raw_json), model="raw-json", messages=HI, max_tokens=30, **sampling)
    assert m["content"] and m["finish"] in ("stop", "length")
    r = client_of(raw_json).chat.completions.create(model="raw-json", messages=HI, max_tokens=30, **sampling)
    assert r.model == "raw-json" and r.usage is not None and r.usage.prompt_tokens > 0


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_raw_tool_calls_enforced_through_guided_json(raw_json: Server, choice: Any) -> None:
    time_tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"]}}}
    m = both(client_of(raw_json), model="raw-json", messages=ASK, tools=[WEATHER, time_tool], tool_choice=choice, parallel_tool_calls=False, temperature=0.8, seed=5, max_tokens=120)
    allowed = {"get_weather"} if choice == NAMED else {"get_weather", "get_time"}
    assert len(m["calls"]) == 1 and m["finish"] == "tool_calls"
    for call in m["calls"]:
        assert call["name"] in allowed and call["id"].startswith("call_")
        schema = SCHEMAS.get(call["name"]) or time_tool["function"]["parameters"]  # type: ignore[index]
        jsonschema.validate(json.loads(call["arguments"]), schema)


def test_raw_tool_choice_auto_gives_a_parseable_call(raw_json: Server) -> None:
    # after a first call in the history: asked alone, the 135M model's pick between a call and an
    # answer is a near tie that the rounding of how the prompt was read can turn either way
    ask = [
        {"role": "user", "content": "What's the weather like in Berlin today?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Berlin"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 12, "sky": "cloudy"}'},
        {"role": "assistant", "content": "It is 12 degrees and cloudy in Berlin."},
        *ASK,
    ]
    m = both(client_of(raw_json), model="raw-json", messages=ask, tools=[WEATHER], temperature=0, max_tokens=120)
    assert_valid_calls(m, {"get_weather"})
    assert m["content"] == ""


UNIT_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "unit"]}}}


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_raw_family_grammar_goes_upstream(raw_family: Server, choice: Any) -> None:
    """Qwen3-Coder's XML calls, which the bundled model never writes by itself, come back from
    the upstream well-formed and schema-valid: the family's grammar held its sampling there."""
    time_tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}}, "required": ["zone"]}}}
    tools = [UNIT_WEATHER, time_tool]
    m = both(client_of(raw_family), model="raw-qwen3", messages=ASK, tools=tools, tool_choice=choice, parallel_tool_calls=False,
             temperature=0.8, seed=3, max_tokens=120)
    assert len(m["calls"]) == 1 and m["finish"] == "tool_calls" and m["content"] == "", m
    call = m["calls"][0]
    assert call["name"] in ({"get_weather"} if choice == NAMED else {"get_weather", "get_time"})
    jsonschema.validate(json.loads(call["arguments"]), next(t for t in tools if t["function"]["name"] == call["name"])["function"]["parameters"])
    body = {"model": "raw-qwen3", "messages": ASK, "tools": tools, "tool_choice": choice, "parallel_tool_calls": False,
            "temperature": 0.8, "seed": 3, "max_tokens": 120, "toolserve": {"raw": True}}
    raw = httpx.post(f"{raw_family.url}/v1/chat/completions", json=body, timeout=120).json()["toolserve"]["choices"][0]["raw_text"]
    assert raw.lstrip().startswith(f"<tool_call>\n<function={call['name']}>"), raw


def test_raw_family_auto_lets_prose_through(raw_family: Server) -> None:
    m = both(client_of(raw_family), model="raw-qwen3", messages=HI, tools=[UNIT_WEATHER], temperature=0, max_tokens=40)
    assert m["content"] and m["calls"] == [] and m["finish"] in ("stop", "length")


def test_raw_auto_grammar_holds_a_call_the_upstream_starts(raw_pythonic: Server, server: Server) -> None:
    """Under `auto` the upstream's lazy grammar lets prose through, but an answer that opens
    with the family's lead marker is a call from there on: with the `[` token pushed up, the
    bundled model starts with it and the grammar completes a valid pythonic call (unconstrained,
    the same bias gives `[[[[...` until max_tokens)."""
    bracket = httpx.post(f"{server.url}/tokenize", json={"content": "["}, timeout=30).json()["tokens"]
    assert len(bracket) == 1
    m = both(client_of(raw_pythonic), model="raw-py", messages=ASK, tools=[UNIT_WEATHER], parallel_tool_calls=False, temperature=0, max_tokens=60,
             logit_bias={str(bracket[0]): 10})
    assert len(m["calls"]) == 1 and m["finish"] == "tool_calls", m
    jsonschema.validate(json.loads(m["calls"][0]["arguments"]), UNIT_WEATHER["function"]["parameters"])


@pytest.mark.parametrize("mode", ["xgrammar", "bound"])
def test_raw_grammar_an_upstream_refuses_is_a_400_naming_the_flag(misbehaving: Misbehaving, mode: str) -> None:
    """vLLM started with a structured-output backend that cannot read llguidance's Lark
    (xgrammar: a 400), or whose engine an earlier structured request bound to one (a 500 under a
    grammar, answers without): found at start, every tool request is a 400 saying which vLLM
    setting takes the grammar, requests without tools are served."""
    misbehaving.mode = mode
    with front(["--upstream", misbehaving.url, "--upstream-mode", "raw", "--upstream-guided", "vllm", "--tool-format", "hermes",
                "--model-alias", "refusing"]) as srv:
        for stream in (False, True):
            body = {"model": "refusing", "messages": ASK, "tools": [WEATHER], "tool_choice": "required", "stream": stream}
            r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=60)
            assert r.status_code == 400, r.text
            err = error_of(r)
            assert err["param"] == "tool_choice" and "--structured-outputs-config.backend guidance" in err["message"], err
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "refusing", "messages": HI, "max_tokens": 5}, timeout=60)
        assert r.status_code == 200, r.text  # no tools, no grammar: served


OWN_TEMPLATE = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}\n{% endfor %}<<assistant>>"


def test_raw_mode_renders_with_the_model_own_template_from_where_vllm_loaded_it(misbehaving: Misbehaving, tmp_path: Path) -> None:
    """No --chat-template: vLLM's /v1/models gives the model's `root`, a directory here, whose
    chat_template.jinja raw mode renders with (and its card says so), not the bundled ChatML."""
    (tmp_path / "chat_template.jinja").write_text(OWN_TEMPLATE)
    misbehaving.mode, misbehaving.root = "xgrammar", str(tmp_path)
    try:
        with front(["--upstream", misbehaving.url, "--upstream-mode", "raw", "--model-alias", "own"]) as srv:
            card = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["data"][0]["toolserve"]
            assert card["chat_template"] == f"dir:{tmp_path}/chat_template.jinja", card
            r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "own", "messages": HI, "max_tokens": 5}, timeout=60)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Red.", r.text
            assert misbehaving.prompts[-1] == "<<user>>Name three colours.\n<<assistant>>"
    finally:
        misbehaving.root = None


def test_raw_mode_takes_the_template_of_a_hub_repo_from_the_cache(misbehaving: Misbehaving, tmp_path: Path) -> None:
    """--upstream-model a Hub repo id: its tokenizer_config.json's template, read from
    huggingface_hub's cache offline (a named list: the tool_use one)."""
    snapshot = tmp_path / "models--acme--tiny-chat" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--acme--tiny-chat" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-chat" / "refs" / "main").write_text("0123abcd")
    config = {"chat_template": [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": OWN_TEMPLATE}]}
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config))
    misbehaving.mode = "xgrammar"
    args = ["--upstream", misbehaving.url, "--upstream-mode", "raw", "--upstream-model", "acme/tiny-chat", "--model-alias", "hub", "--offline"]
    with front(args, env={"HF_HUB_CACHE": str(tmp_path)}) as srv:
        card = httpx.get(f"{srv.url}/v1/models", timeout=30).json()["data"][0]["toolserve"]
        assert card["chat_template"] == "hub:acme/tiny-chat/tokenizer_config.json", card
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "hub", "messages": HI, "max_tokens": 5}, timeout=60)
        assert r.status_code == 200, r.text
        assert misbehaving.prompts[-1] == "<<user>>Name three colours.\n<<assistant>>"


def test_raw_response_format_json_schema(raw_json: Server) -> None:
    schema = {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 3, "maxItems": 3}}, "required": ["colours"]}
    rf = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}
    m = both(client_of(raw_json), model="raw-json", messages=HI, response_format=rf, temperature=0.8, seed=2, max_tokens=80)
    jsonschema.validate(json.loads(m["content"]), schema)


def test_raw_mode_returns_the_upstream_text_on_request(raw_json: Server) -> None:
    """`toolserve.raw` in raw mode: the text the upstream completed, before our parser read it."""
    body = {"model": "raw-json", "messages": ASK, "tools": [WEATHER], "tool_choice": "required", "temperature": 0,
            "max_tokens": 120, "toolserve": {"raw": True}}
    whole = httpx.post(f"{raw_json.url}/v1/chat/completions", json=body, timeout=120).json()
    block = whole["toolserve"]
    assert block["tool_format"] == "generic_json"
    raw = json.loads(block["choices"][0]["raw_text"])  # generic_json: the whole answer is JSON (the upstream's guided output)
    call = whole["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and '"get_weather"' in block["choices"][0]["raw_text"]
    last = sse_events(f"{raw_json.url}/v1/chat/completions", body)[-1]
    assert last["choices"] == [] and json.loads(last["toolserve"]["choices"][0]["raw_text"]) == raw


def test_passthrough_refuses_raw(passthrough: Server) -> None:
    """A passthrough upstream parses its own output: toolserve never sees the raw text to give."""
    for stream in (False, True):
        r = httpx.post(f"{passthrough.url}/v1/chat/completions",
                       json={"model": "front", "messages": HI, "max_tokens": 2, "stream": stream, "toolserve": {"raw": True}}, timeout=60)
        assert r.status_code == 400 and error_of(r)["param"] == "toolserve.raw" and error_of(r)["code"] == "unsupported"
    ok = httpx.post(f"{passthrough.url}/v1/chat/completions",
                    json={"model": "front", "messages": HI, "max_tokens": 2, "toolserve": {"raw": False}}, timeout=60)
    assert ok.status_code == 200 and "toolserve" not in ok.json()


def test_raw_with_llama_cpp_server(llama_raw: Server) -> None:
    c = client_of(llama_raw)
    whole = c.chat.completions.create(model="raw-llama", messages=HI, max_tokens=20, temperature=0)
    assert whole.model == "raw-llama" and whole.choices[0].message.content
    text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(model="raw-llama", messages=HI, max_tokens=20, temperature=0, stream=True) if ch.choices)
    assert text == whole.choices[0].message.content


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice", "hermes"),
        ({"tools": [WEATHER], "tool_choice": NAMED}, "tool_choice", "raw mode"),
        ({"response_format": {"type": "json_object"}}, "response_format", "guided"),
        ({"logprobs": True}, "logprobs", "raw mode"),
    ],
)
def test_raw_refuses_what_the_upstream_cannot_do(llama_raw: Server, extra: dict[str, Any], param: str, words: str) -> None:
    r = httpx.post(f"{llama_raw.url}/v1/chat/completions", json={"model": "raw-llama", "messages": ASK, **extra}, timeout=60)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["param"] == param and words in err["message"]


# ---- errors, timeouts, health --------------------------------------------------------------------


def test_upstream_4xx_is_forwarded(passthrough: Server, raw_json: Server, llama_raw: Server, server: Server) -> None:
    bad = {"messages": HI, "logit_bias": {"99999999": 1}}
    direct = httpx.post(f"{server.url}/v1/chat/completions", json=bad, timeout=60)
    for stream in (False, True):
        r = httpx.post(f"{passthrough.url}/v1/chat/completions", json={**bad, "stream": stream}, timeout=60)
        assert r.status_code == 400  # a streaming request too: the status comes before the stream
        assert error_of(r) == error_of(direct)
    r = httpx.post(f"{raw_json.url}/v1/chat/completions", json={"messages": LONG}, timeout=60)
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"

def test_llama_cpp_server_errors(llama_pass: Server, llama_raw: Server) -> None:
    r = httpx.post(f"{llama_pass.url}/v1/chat/completions", json={"messages": LONG}, timeout=60)
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    # its stream ends empty, without a finish_reason, when the prompt is too long: not an answer
    r = httpx.post(f"{llama_raw.url}/v1/chat/completions", json={"messages": LONG}, timeout=60)
    assert r.status_code == 502 and "without finishing" in error_of(r)["message"]


def test_unknown_upstream_model_is_its_404(server: Server) -> None:
    with front(["--upstream", server.url, "--upstream-model", "no-such-model"]) as srv:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI}, timeout=60)
        assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
        assert "no-such-model" in error_of(r)["message"]


def test_upstream_5xx_becomes_502(broken: Server, misbehaving: Misbehaving) -> None:
    misbehaving.mode = "error"
    for stream in (False, True):
        r = httpx.post(f"{broken.url}/v1/chat/completions", json={"messages": HI, "stream": stream}, timeout=60)
        assert r.status_code == 502
        err = error_of(r)
        assert err["code"] == "upstream_error" and "the GPU caught fire" in err["message"]


def test_upstream_text_with_a_lone_surrogate_is_mended(broken: Server, misbehaving: Misbehaving) -> None:
    misbehaving.mode = "surrogate"
    r = httpx.post(f"{broken.url}/v1/chat/completions", json={"messages": HI}, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hel\ufffdlo"
    events = sse_events(f"{broken.url}/v1/chat/completions", {"messages": HI})
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == "Hel\ufffdlo"


def test_stalled_upstream_times_out(broken: Server, misbehaving: Misbehaving) -> None:
    misbehaving.mode = "stall"
    started = time.monotonic()
    r = httpx.post(f"{broken.url}/v1/chat/completions", json={"messages": HI}, timeout=60)
    assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"
    events = sse_events(f"{broken.url}/v1/chat/completions", {"messages": HI})
    assert events[0]["choices"][0]["delta"]["content"] == "Hel"  # what came before the stall
    assert events[-1]["error"]["code"] == "upstream_timeout"
    assert time.monotonic() - started < 20


def test_slow_upstream_times_out_but_a_flowing_stream_does_not(hasty: Server, server: Server) -> None:
    long = {"messages": HI, "max_tokens": 1800, "logit_bias": NO_EOS}
    started = time.monotonic()
    r = httpx.post(f"{hasty.url}/v1/chat/completions", json=long, timeout=120)
    assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"
    assert "4 s" in error_of(r)["message"] and time.monotonic() - started < 30
    wait_idle(server.url)  # the upstream saw the connection close and stopped
    events = sse_events(f"{hasty.url}/v1/chat/completions", {**long, "max_tokens": 600})  # > 4 s in all, never 4 s silent
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def test_upstream_down_at_start_then_back_then_gone(model_id: str) -> None:
    port = free_port()
    with front(["--upstream", f"http://127.0.0.1:{port}", "--upstream-model", model_id, "--model-alias", "later"]) as srv:
        health = httpx.get(f"{srv.url}/health")
        assert health.status_code == 503 and health.json()["models"]["later"]["available"] is False
        started = time.monotonic()
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 4}, timeout=60)
        assert r.status_code == 503 and time.monotonic() - started < 1  # fails fast
        err = error_of(r)
        assert err["code"] == "upstream_unavailable" and "'later'" in err["message"] and "cannot be reached" in err["message"]
        assert r.headers["retry-after"]
        upstream = Server(["--ctx-size", "1024"], port=port)
        try:
            deadline = time.monotonic() + 30
            while (r := httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 4}, timeout=60)).status_code != 200:
                assert r.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.3)
            assert httpx.get(f"{srv.url}/health").json()["status"] == "ok"
        finally:
            upstream.stop()
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 4}, timeout=60)
        assert r.status_code == 503 and error_of(r)["code"] == "upstream_unavailable"
        assert httpx.get(f"{srv.url}/health").json()["models"]["later"]["available"] is False  # marked at once


# ---- the other protocols through the same core ----------------------------------------------------

FN_WEATHER = {"type": "function", **WEATHER["function"]}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_api_through_passthrough_and_raw(passthrough: Server, raw_json: Server, stream: bool) -> None:
    """An upstream model answers the Responses API too: passthrough sends the conversation as a
    chat request to the upstream's chat endpoint, raw renders and parses it here."""
    for srv in (passthrough, raw_json):
        oa = client_of(srv)
        kw: dict[str, Any] = {"model": None, "input": "What's the weather like in Paris today?", "tools": [FN_WEATHER],
                              "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0}
        kw["model"] = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
        if stream:
            with oa.responses.stream(**kw) as s:
                r = s.get_final_response()
        else:
            r = oa.responses.create(**kw)
        (call,) = [o for o in r.output if o.type == "function_call"]
        assert call.name == "get_weather" and r.status == "completed", srv.url
        jsonschema.validate(json.loads(call.arguments), FN_WEATHER["parameters"])
        assert r.usage is not None and r.usage.input_tokens > 0


def test_messages_api_through_passthrough_and_raw(passthrough: Server, raw_json: Server) -> None:
    import anthropic

    tool = {"name": "get_weather", "description": WEATHER["function"]["description"], "input_schema": WEATHER["function"]["parameters"]}
    for srv in (passthrough, raw_json):
        model = httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"]
        client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)
        msg = client.messages.create(model=model, max_tokens=200, tools=[tool],  # type: ignore[list-item]
                                     tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                     messages=[{"role": "user", "content": "What's the weather like in Paris today?"}])
        (use,) = [b for b in msg.content if b.type == "tool_use"]
        assert msg.stop_reason == "tool_use" and use.name == "get_weather", srv.url
        jsonschema.validate(use.input, WEATHER["function"]["parameters"])
