"""Repair of an OpenAI-compatible upstream's chat completions (passthrough mode).

The streams below are written as the upstreams send them. What each is modelled on (shapes
reported in public issues; no upstream code was copied):

- vLLM's usual shape (hermes / llama3_json parsers): a first delta with `id`, `type`, `index`
  and `name` and no `arguments`, then argument fragments, then a last chunk with `content: ""`
  and the finish reason (vllm-project/vllm#9693; a vLLM log quoted in sgl-project/sglang#4700).
- vLLM's later deltas carrying `id: ""` and `type: "function"` again, and parallel calls with
  index 0, 1 (as recorded from vLLM in InternLM/lmdeploy#3412).
- vLLM v1 with a named `tool_choice`: every delta `{"index": 0, "function": {"name", "arguments"}}`,
  no `id`, no `type`: the name repeated in every delta (vllm-project/vllm#13078; clients then
  concatenate the name, vllm-project/vllm#14951).
- `finish_reason: "stop"` while tool calls were streamed (vllm-project/vllm#9209, #25054), and
  `"length"` to be kept for a call cut by max_tokens (vllm-project/vllm#53269).
- no `id` on streamed calls although the non-streaming response has one (vllm-project/vllm#18412).
- double-encoded arguments: the hermes parser serialized again arguments that Granite 4 had
  already written as a JSON string (vllm-project/vllm#54964).
- no arguments at all for a parameterless tool while streaming (vllm-project/vllm#28806).
- not vLLM, seen from other OpenAI-compatible servers: `index` omitted (Gemini's compatible
  endpoint: openai/openai-python#3246, AstrBotDevs/AstrBot#6692), the whole arguments so far
  resent in every chunk (DeepSeek / Qianfan: NousResearch/hermes-agent#35718) or once more at
  the end (elizaOS/eliza#16973), a name split over chunks (continuedev/continue#5849), and
  SGLang sending index 0 for every call with ids "0", "1" (InternLM/lmdeploy#3412).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from toolserve.upstream.repair import StreamRepair, decode_arguments, repair_response

Json = dict[str, Any]
USAGE = {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}


class Ids:
    """A deterministic id factory: call_gen0, call_gen1, ..."""

    def __init__(self) -> None:
        self._n = itertools.count()

    def __call__(self) -> str:
        return f"call_gen{next(self._n)}"


# ---- building and reading streams --------------------------------------------------------


def chunk(*choices: Json, usage: Json | None = None) -> Json:
    out: Json = {"id": "chatcmpl-7f3a", "object": "chat.completion.chunk", "created": 1739261756,
                 "model": "Qwen/Qwen2.5-7B-Instruct", "choices": list(choices)}
    if usage is not None:
        out["usage"] = usage
    return out


def ch(delta: Json, finish: str | None = None, index: int = 0) -> Json:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


def tools(*calls: Json) -> Json:
    return {"tool_calls": list(calls)}


def response(*choices: Json) -> Json:
    return {"id": "chatcmpl-7f3a", "object": "chat.completion", "created": 1739261756,
            "model": "Qwen/Qwen2.5-7B-Instruct", "choices": list(choices), "usage": USAGE}


def message(content: str | None = None, calls: list[Json] | None = None, finish: str = "stop",
            index: int = 0, reasoning: str | None = None, reasoning_field: str = "reasoning_content") -> Json:
    msg: Json = {"role": "assistant", "content": content, "tool_calls": calls or []}
    if reasoning is not None:
        msg[reasoning_field] = reasoning
    return {"index": index, "message": msg, "logprobs": None, "finish_reason": finish}


def call(name: str, arguments: Any, call_id: str | None = None) -> Json:
    out: Json = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        out["id"] = call_id
    return out


def run(stream: list[Json], ids: Ids | None = None) -> list[Json]:
    repair = StreamRepair(id_factory=ids or Ids())
    out: list[Json] = []
    for c in stream:
        out += repair.feed(c)
    return out + repair.finish()


def check_contract(chunks: list[Json]) -> None:
    """The OpenAI streaming contract, per choice and per tool-call index."""
    role_seen: set[int] = set()
    started: dict[int, list[int]] = {}
    finished: set[int] = set()
    for c in chunks:
        for choice in c.get("choices", []):
            i, delta = choice["index"], choice["delta"]
            assert i not in finished, "a delta after the choice finished"
            if i not in role_seen:
                assert delta.get("role") == "assistant", "role must come in the first delta"
                role_seen.add(i)
            else:
                assert "role" not in delta, "role sent twice"
            for tc in delta.get("tool_calls", []):
                assert isinstance(tc["index"], int)
                seen = started.setdefault(i, [])
                if tc["index"] not in seen:
                    assert tc["index"] == len(seen), "tool indexes must count up from 0"
                    assert set(tc) == {"index", "id", "type", "function"}
                    assert tc["id"] and tc["type"] == "function" and tc["function"]["name"]
                    assert isinstance(tc["function"]["arguments"], str)
                    seen.append(tc["index"])
                else:
                    assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
                    assert isinstance(tc["function"]["arguments"], str) and tc["function"]["arguments"]
            reason = choice.get("finish_reason")
            if reason is not None:
                finished.add(i)
                if reason not in ("length", "content_filter"):
                    assert reason == ("tool_calls" if started.get(i) else "stop")
    assert finished == role_seen, "every choice must finish"


def assemble(chunks: list[Json]) -> dict[int, Json]:
    """What a client gets by concatenating the deltas (the openai SDK's accumulation)."""
    acc: dict[int, Json] = {}
    for c in chunks:
        for choice in c.get("choices", []):
            m = acc.setdefault(choice["index"], {"role": None, "content": "", "reasoning_content": "",
                                                 "calls": {}, "finish_reason": None})
            delta = choice["delta"]
            m["role"] = m["role"] or delta.get("role")
            m["content"] += delta.get("content") or ""
            assert delta.get("reasoning_content") == delta.get("reasoning"), "reasoning under both names, the same text"
            m["reasoning_content"] += delta.get("reasoning_content") or ""
            for tc in delta.get("tool_calls", []):
                slot = m["calls"].setdefault(tc["index"], {"id": tc.get("id"), "type": tc.get("type"),
                                                           "name": tc["function"].get("name"), "arguments": ""})
                slot["arguments"] += tc["function"]["arguments"]
            m["finish_reason"] = choice.get("finish_reason") or m["finish_reason"]
    return {i: {"role": m["role"], "content": m["content"] or None,
                "reasoning_content": m["reasoning_content"] or None,
                "tool_calls": [m["calls"][k] for k in sorted(m["calls"])],
                "finish_reason": m["finish_reason"]} for i, m in acc.items()}


def messages_of(body: Json) -> dict[int, Json]:
    """The same shape, read from a non-streaming response."""
    out = {}
    for choice in body["choices"]:
        m = choice["message"]
        assert m.get("reasoning_content") == m.get("reasoning"), "reasoning under both names, the same text"
        out[choice["index"]] = {
            "role": m["role"], "content": m.get("content") or None,
            "reasoning_content": m.get("reasoning_content") or None,
            "tool_calls": [{"id": tc["id"], "type": tc["type"], "name": tc["function"]["name"],
                            "arguments": tc["function"]["arguments"]} for tc in m.get("tool_calls") or []],
            "finish_reason": choice["finish_reason"]}
    return out


def without_ids(msgs: dict[int, Json]) -> dict[int, Json]:
    return {i: {**m, "tool_calls": [{k: v for k, v in tc.items() if k != "id"} for tc in m["tool_calls"]]}
            for i, m in msgs.items()}


# ---- the recorded cases ------------------------------------------------------------------


@dataclass
class Want:
    """What a client must end up with for one choice. A call is (id, name, arguments); id None
    means the upstream gave none in the stream, so an invented `call_...` is expected."""

    calls: list[tuple[str | None, str, str]] = field(default_factory=list)
    finish: str = "tool_calls"
    content: str | None = None
    reasoning: str | None = None


@dataclass
class Case:
    name: str
    stream: list[Json]
    body: Json  # the equivalent non-streaming response
    want: dict[int, Want]


ROLE = chunk(ch({"role": "assistant", "content": ""}))

CASES = [
    Case(
        "vllm_usual_shape",
        [ROLE,
         chunk(ch(tools({"id": "chatcmpl-tool-1a2b", "type": "function", "index": 0,
                         "function": {"name": "get_weather"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": "'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": "Paris"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '"}'}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Paris"}', "chatcmpl-tool-1a2b")], "tool_calls")),
        {0: Want([("chatcmpl-tool-1a2b", "get_weather", '{"city": "Paris"}')])},
    ),
    Case(
        # vLLM v1, named tool_choice: name in every delta, no id, arguments split inside `\"`,
        # and finish_reason "stop"
        "vllm_named_choice_name_repeated_split_escape",
        [ROLE,
         chunk(ch(tools({"index": 0, "function": {"name": "search", "arguments": '{"q": "a\\'}}))),
         chunk(ch(tools({"index": 0, "function": {"name": "search", "arguments": '"b"}'}}))),
         chunk(ch({"content": ""}, "stop"))],
        response(message(None, [call("search", '{"q": "a\\"b"}')], "stop")),
        {0: Want([(None, "search", '{"q": "a\\"b"}')])},
    ),
    Case(
        "index_missing",
        [ROLE,
         chunk(ch(tools({"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"function": {"arguments": '{"city": "Paris"}'}}))),
         chunk(ch(tools({"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": ""}}))),
         chunk(ch(tools({"function": {"arguments": '{"tz": '}}))),
         chunk(ch(tools({"function": {"arguments": '"CET"}'}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Paris"}', "call_a"),
                                call("get_time", '{"tz": "CET"}', "call_b")], "tool_calls")),
        {0: Want([("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", '{"tz": "CET"}')])},
    ),
    Case(
        "id_missing",
        [ROLE,
         chunk(ch(tools({"index": 0, "type": "function", "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": '}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '"Oslo"}'}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Oslo"}')], "tool_calls")),
        {0: Want([(None, "get_weather", '{"city": "Oslo"}')])},
    ),
    Case(
        # vLLM: later deltas repeat type and carry id "" and name null
        "vllm_two_parallel_calls",
        [ROLE,
         chunk(ch(tools({"index": 0, "id": "chatcmpl-tool-c9Z", "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "id": "", "type": "function",
                         "function": {"name": None, "arguments": '{"city": "Paris"}'}}))),
         chunk(ch(tools({"index": 1, "id": "chatcmpl-tool-Hfz", "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 1, "id": "", "type": "function",
                         "function": {"name": None, "arguments": '{"city": "Rome"}'}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Paris"}', "chatcmpl-tool-c9Z"),
                                call("get_weather", '{"city": "Rome"}', "chatcmpl-tool-Hfz")], "tool_calls")),
        {0: Want([("chatcmpl-tool-c9Z", "get_weather", '{"city": "Paris"}'),
                  ("chatcmpl-tool-Hfz", "get_weather", '{"city": "Rome"}')])},
    ),
    Case(
        # the whole arguments so far in every chunk, then the full text once more
        "accumulated_arguments_resent",
        [ROLE,
         chunk(ch(tools({"index": 0, "id": "call_w", "type": "function",
                         "function": {"name": "write_file", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"path": "a.txt"'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"path": "a.txt", "text": "hi'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"path": "a.txt", "text": "hi"}'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"path": "a.txt", "text": "hi"}'}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("write_file", '{"path": "a.txt", "text": "hi"}', "call_w")], "tool_calls")),
        {0: Want([("call_w", "write_file", '{"path": "a.txt", "text": "hi"}')])},
    ),
    Case(
        # incremental fragments, then the complete arguments resent at the end
        "full_arguments_resent_at_the_end",
        [ROLE,
         chunk(ch(tools({"index": 0, "id": "call_e", "type": "function", "function": {"name": "shell"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"cmd": '}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '"ls"}'}}))),
         chunk(ch(tools({"index": 0, "id": "call_e", "type": "function",
                         "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("shell", '{"cmd": "ls"}', "call_e")], "tool_calls")),
        {0: Want([("call_e", "shell", '{"cmd": "ls"}')])},
    ),
    Case(
        # arguments are a JSON string holding the JSON, split inside an escape
        "double_encoded_arguments",
        [ROLE,
         chunk(ch(tools({"id": "chatcmpl-tool-g4", "type": "function", "index": 0,
                         "function": {"name": "get_db_config"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '"{\\'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '"param\\": \\"max_conn'}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": 'ections\\"}"'}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_db_config", '"{\\"param\\": \\"max_connections\\"}"', "chatcmpl-tool-g4")],
                         "tool_calls")),
        {0: Want([("chatcmpl-tool-g4", "get_db_config", '{"param": "max_connections"}')])},
    ),
    Case(
        "finish_stop_with_a_call",
        [ROLE,
         chunk(ch(tools({"id": "chatcmpl-tool-s1", "type": "function", "index": 0,
                         "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": "Lima"}'}}))),
         chunk(ch({"content": ""}, "stop"))],
        response(message(None, [call("get_weather", '{"city": "Lima"}', "chatcmpl-tool-s1")], "stop")),
        {0: Want([("chatcmpl-tool-s1", "get_weather", '{"city": "Lima"}')])},
    ),
    Case(
        "finish_tool_calls_without_a_call",
        [ROLE, chunk(ch({"content": "No tool needed."})), chunk(ch({"content": ""}, "tool_calls"))],
        response(message("No tool needed.", None, "tool_calls")),
        {0: Want([], "stop", "No tool needed.")},
    ),
    Case(
        "length_is_kept",
        [ROLE,
         chunk(ch(tools({"id": "chatcmpl-tool-l", "type": "function", "index": 0,
                         "function": {"name": "get_weather"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": "Par'}}))),
         chunk(ch({}, "length"))],
        response(message(None, [call("get_weather", '{"city": "Par', "chatcmpl-tool-l")], "length")),
        {0: Want([("chatcmpl-tool-l", "get_weather", '{"city": "Par')], "length")},
    ),
    Case(
        # n=2: vLLM sends one choice per chunk, interleaved; then the usage chunk
        "two_choices_interleaved_and_usage",
        [chunk(ch({"role": "assistant", "content": ""}, index=0)),
         chunk(ch({"role": "assistant", "content": ""}, index=1)),
         chunk(ch({"content": "It is "}, index=0)),
         chunk(ch(tools({"id": "chatcmpl-tool-n1", "type": "function", "index": 0,
                         "function": {"name": "get_weather"}}), index=1)),
         chunk(ch({"content": "sunny."}, index=0)),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}), index=1)),
         chunk(ch({"content": ""}, "stop", index=0)),
         chunk(ch({"content": ""}, "stop", index=1)),
         chunk(usage=USAGE)],
        response(message("It is sunny.", None, "stop", 0),
                 message(None, [call("get_weather", '{"city": "Oslo"}', "chatcmpl-tool-n1")], "stop", 1)),
        {0: Want([], "stop", "It is sunny."), 1: Want([("chatcmpl-tool-n1", "get_weather", '{"city": "Oslo"}')])},
    ),
    Case(
        "name_split_over_deltas",
        [ROLE,
         chunk(ch(tools({"index": 0, "id": "call_sp", "type": "function", "function": {"name": "edit_ex"}}))),
         chunk(ch(tools({"index": 0, "function": {"name": "isting_file"}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"path": "x"}'}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("edit_existing_file", '{"path": "x"}', "call_sp")], "tool_calls")),
        {0: Want([("call_sp", "edit_existing_file", '{"path": "x"}')])},
    ),
    Case(
        # SGLang: index 0 for both calls, the id on every delta
        "sglang_index_reused_with_new_id",
        [ROLE,
         chunk(ch(tools({"index": 0, "id": "0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "id": "0", "type": "function", "function": {"arguments": '{"city": "Paris"}'}}))),
         chunk(ch(tools({"index": 0, "id": "1", "type": "function", "function": {"name": "get_time", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "id": "1", "type": "function", "function": {"arguments": '{"tz": "CET"}'}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Paris"}', "0"), call("get_time", '{"tz": "CET"}', "1")],
                         "tool_calls")),
        {0: Want([("0", "get_weather", '{"city": "Paris"}'), ("1", "get_time", '{"tz": "CET"}')])},
    ),
    Case(
        "parameterless_tool_without_arguments",
        [ROLE,
         chunk(ch(tools({"id": "chatcmpl-tool-np", "type": "function", "index": 0, "function": {"name": "get_time"}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_time", None, "chatcmpl-tool-np")], "tool_calls")),
        {0: Want([("chatcmpl-tool-np", "get_time", "{}")])},
    ),
    Case(
        "arguments_as_an_object",
        [ROLE,
         chunk(ch(tools({"id": "call_o", "type": "function", "index": 0,
                         "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}))),
         chunk(ch({}, "tool_calls"))],
        response(message(None, [call("get_weather", {"city": "Zürich"}, "call_o")], "tool_calls")),
        {0: Want([("call_o", "get_weather", '{"city": "Zürich"}')])},
    ),
    Case(
        # --reasoning-parser: reasoning_content deltas before the call pass through
        "reasoning_then_call",
        [ROLE,
         chunk(ch({"reasoning_content": "Need the "})),
         chunk(ch({"reasoning_content": "weather."})),
         chunk(ch(tools({"id": "chatcmpl-tool-r", "type": "function", "index": 0,
                         "function": {"name": "get_weather", "arguments": ""}}))),
         chunk(ch(tools({"index": 0, "function": {"arguments": '{"city": "Kyiv"}'}}))),
         chunk(ch({"content": ""}, "tool_calls"))],
        response(message(None, [call("get_weather", '{"city": "Kyiv"}', "chatcmpl-tool-r")], "tool_calls",
                         reasoning="Need the weather.")),
        {0: Want([("chatcmpl-tool-r", "get_weather", '{"city": "Kyiv"}')], reasoning="Need the weather.")},
    ),
    Case(
        # newer vLLM names it `reasoning` only (0.32's shape): clients reading
        # `reasoning_content` (DeepSeek's name) get it too
        "reasoning_named_reasoning",
        [chunk(ch({"role": "assistant", "content": ""})),
         chunk(ch({"reasoning": "The user "})),
         chunk(ch({"reasoning": "greets me."})),
         chunk(ch({"content": "Hello!"})),
         chunk(ch({}, "stop"))],
        response(message("Hello!", reasoning="The user greets me.", reasoning_field="reasoning")),
        {0: Want(content="Hello!", finish="stop", reasoning="The user greets me.")},
    ),
    Case(
        # the stream ends without a finish reason while the first delta is still held
        "stream_cut_before_finish",
        [ROLE, chunk(ch(tools({"index": 0, "id": "call_cut", "type": "function", "function": {"name": "get_time"}})))],
        response(message(None, [call("get_time", "", "call_cut")], "tool_calls")),
        {0: Want([("call_cut", "get_time", "{}")])},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stream_is_repaired(case: Case) -> None:
    out = run(case.stream)
    check_contract(out)
    got = assemble(out)
    assert sorted(got) == sorted(case.want)
    for i, want in case.want.items():
        m = got[i]
        assert m["role"] == "assistant"
        assert (m["content"], m["reasoning_content"], m["finish_reason"]) == (want.content, want.reasoning, want.finish)
        assert [(tc["name"], tc["arguments"]) for tc in m["tool_calls"]] == [(n, a) for _, n, a in want.calls]
        for tc, (want_id, _, _) in zip(m["tool_calls"], want.calls, strict=True):
            assert tc["id"] == want_id if want_id is not None else tc["id"].startswith("call_gen")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_response_is_repaired(case: Case) -> None:
    original = json.loads(json.dumps(case.body))
    got = messages_of(repair_response(case.body, id_factory=Ids()))
    assert case.body == original, "the input must not be changed"
    for i, want in case.want.items():
        m = got[i]
        assert (m["content"], m["reasoning_content"], m["finish_reason"]) == (want.content, want.reasoning, want.finish)
        assert [(tc["name"], tc["arguments"]) for tc in m["tool_calls"]] == [(n, a) for _, n, a in want.calls]
        given = case.body["choices"][i]["message"]["tool_calls"]
        for tc, up in zip(m["tool_calls"], given, strict=True):
            assert tc["type"] == "function"
            assert tc["id"] == up["id"] if up.get("id") else tc["id"].startswith("call_gen")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stream_concatenates_to_the_repaired_response(case: Case) -> None:
    streamed = assemble(run(case.stream))
    whole = messages_of(repair_response(case.body, id_factory=Ids()))
    assert without_ids(streamed) == without_ids(whole)


# ---- details -----------------------------------------------------------------------------


def test_usage_chunk_passes_through_last_after_open_choices_close() -> None:
    stream = [ROLE, chunk(ch(tools({"index": 0, "id": "call_u", "type": "function", "function": {"name": "f"}}))),
              chunk(usage=USAGE)]
    repair = StreamRepair(id_factory=Ids())
    out = [c for s in stream for c in repair.feed(s)] + repair.finish()
    assert out[-1] == chunk(usage=USAGE)
    closing = out[-2]["choices"][0]
    assert closing["finish_reason"] == "tool_calls"
    assert closing["delta"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}


def test_held_name_goes_out_with_the_first_arguments() -> None:
    repair = StreamRepair(id_factory=Ids())
    assert repair.feed(ROLE)[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    held = chunk(ch(tools({"id": "chatcmpl-tool-h", "type": "function", "index": 0, "function": {"name": "get_"}})))
    assert repair.feed(held) == []
    assert repair.feed(chunk(ch(tools({"index": 0, "function": {"name": "weather"}})))) == []
    out = repair.feed(chunk(ch(tools({"index": 0, "function": {"arguments": '{"a": 1}'}}))))
    assert out[0]["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "chatcmpl-tool-h", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"a": 1}'}}]
    assert out[0]["id"] == "chatcmpl-7f3a"


def test_plain_arguments_stream_as_they_come() -> None:
    repair = StreamRepair(id_factory=Ids())
    repair.feed(ROLE)
    repair.feed(chunk(ch(tools({"index": 0, "function": {"name": "f", "arguments": '{"a": '}}))))
    out = repair.feed(chunk(ch(tools({"index": 0, "function": {"name": "f", "arguments": "1}"}}))))
    assert out[0]["choices"][0]["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}


def test_a_new_call_releases_the_previous_held_one_first() -> None:
    out = run([ROLE,
               chunk(ch(tools({"index": 0, "id": "a", "function": {"name": "f"}}))),
               chunk(ch(tools({"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}))),
               chunk(ch({}, "tool_calls"))])
    firsts = [tc["index"] for c in out for choice in c["choices"] for tc in choice["delta"].get("tool_calls", [])
              if "id" in tc]
    assert firsts == [0, 1]


def test_role_repeats_are_dropped_and_an_open_choice_is_closed_by_finish() -> None:
    out = run([chunk(ch({"role": "assistant", "content": "Hi"})), chunk(ch({"role": "assistant", "content": " there"})),
               chunk(ch({"role": "assistant"}))])
    # the role-only repeat is dropped; finish() closes the choice the upstream left open
    assert [c["choices"][0]["delta"] for c in out] == [{"role": "assistant", "content": "Hi"}, {"content": " there"}, {}]
    assert out[-1]["choices"][0]["finish_reason"] == "stop"


def test_role_is_added_when_the_upstream_sends_none() -> None:
    out = run([chunk(ch({"content": "Hi"}, "stop"))])
    assert out[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}


def test_error_object_passes_through() -> None:
    err = {"error": {"message": "boom", "type": "server_error"}}
    assert StreamRepair().feed(err) == [err]


def test_duplicate_ids_in_a_response_are_replaced() -> None:
    body = response(message(None, [call("f", "{}", "x"), call("g", "{}", "x")], "tool_calls"))
    calls = repair_response(body, id_factory=Ids())["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["x", "call_gen0"]


@pytest.mark.parametrize(("raw", "want"), [
    ('{"a": 1}', '{"a": 1}'),
    ('"{\\"a\\": 1}"', '{"a": 1}'),
    ('  "{\\"a\\": 1}"', '{"a": 1}'),
    (json.dumps(json.dumps(json.dumps({"a": 1}))), '{"a": 1}'),  # encoded three times
    ('"hello"', '"hello"'),  # a string that is not JSON stays
    ('"[1, 2]"', '"[1, 2]"'),  # arguments are objects: a list inside is left alone
    ('"{\\"a\\": ', '"{\\"a\\": '),  # cut short: unchanged
    ("", "{}"), ("  ", "{}"), (None, "{}"),
    ({"a": "ü"}, '{"a": "ü"}'),
])
def test_decode_arguments(raw: Any, want: str) -> None:
    assert decode_arguments(raw) == want


# ---- split invariance --------------------------------------------------------------------

VALUES = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none(),
                   st.floats(allow_nan=False, allow_infinity=False),
                   st.lists(st.one_of(st.text(max_size=6), st.integers()), max_size=3))
# Flat objects with identifier keys: a JSON text of that form never begins with some prefix
# written twice, which is the one split the resend rule would misread (see the module doc).
ARGS = st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), VALUES, max_size=4)


def split(data: st.DataObject, text: str) -> list[int]:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
    return [0, *sorted(cuts), len(text)]


def call_deltas(data: st.DataObject, text: str, name: str, call_id: str, index: int, quirks: Json) -> list[Json]:
    bounds = split(data, text)
    if quirks["cumulative"]:
        pieces = [text[:b] for b in bounds[1:]]
    else:
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    deltas: list[Json] = []
    head: Json = {"type": "function", "function": {"name": name}}
    if quirks["ids"]:
        head["id"] = call_id
    if quirks["indexes"]:
        head["index"] = index
    if not quirks["repeat_name"]:
        deltas.append(head)
    for k, piece in enumerate(pieces):
        d: Json = {"function": {"arguments": piece}}
        if quirks["indexes"]:
            d["index"] = index
        if quirks["repeat_name"]:
            d["function"]["name"] = name
            if k == 0 and quirks["ids"]:
                d["id"] = call_id
        deltas.append(d)
    return deltas


@given(first=ARGS, second=st.one_of(st.none(), ARGS), data=st.data(), double=st.booleans(),
       cumulative=st.booleans(), repeat_name=st.booleans(), ids=st.booleans(), indexes=st.booleans(),
       ascii_only=st.booleans(), finish=st.sampled_from(["stop", "tool_calls", None]))
def test_any_split_of_the_arguments_gives_the_same_message(
        first: Json, second: Json | None, data: st.DataObject, double: bool, cumulative: bool, repeat_name: bool,
        ids: bool, indexes: bool, ascii_only: bool, finish: str | None) -> None:
    quirks = {"cumulative": cumulative, "repeat_name": repeat_name, "ids": ids, "indexes": indexes}
    objects = [first] if second is None or not (ids or indexes) else [first, second]
    texts = []
    for obj in objects:
        text = json.dumps(obj, ensure_ascii=ascii_only)
        texts.append(json.dumps(text) if double else text)
    stream = [ROLE]
    for k, text in enumerate(texts):
        for d in call_deltas(data, text, f"tool_{k}", f"chatcmpl-tool-{k}", k, quirks):
            stream.append(chunk(ch(tools(d))))
    if finish is not None:  # None: the upstream's stream just ends
        stream.append(chunk(ch({"content": ""}, finish)))
    body = response(message(None, [call(f"tool_{k}", t, f"chatcmpl-tool-{k}" if ids else None)
                                   for k, t in enumerate(texts)], finish or "stop"))

    out = run(stream)
    check_contract(out)
    streamed = assemble(out)
    assert without_ids(streamed) == without_ids(messages_of(repair_response(body, id_factory=Ids())))
    got = streamed[0]["tool_calls"]
    assert [json.loads(tc["arguments"]) for tc in got] == objects
    assert streamed[0]["finish_reason"] == "tool_calls"
    if ids:
        assert [tc["id"] for tc in got] == [f"chatcmpl-tool-{k}" for k in range(len(objects))]


@given(name=st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True), data=st.data())
def test_a_name_split_anywhere_is_joined(name: str, data: st.DataObject) -> None:
    bounds = split(data, name)
    pieces = [name[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    # a piece equal to the whole name so far reads as a resend: the one split that is ambiguous
    assume(all(p != "".join(pieces[:k]) for k, p in enumerate(pieces) if k))
    stream = [ROLE, chunk(ch(tools({"index": 0, "id": "call_n", "type": "function", "function": {"name": pieces[0]}})))]
    stream += [chunk(ch(tools({"index": 0, "function": {"name": p}}))) for p in pieces[1:]]
    stream += [chunk(ch(tools({"index": 0, "function": {"arguments": "{}"}}))), chunk(ch({}, "tool_calls"))]
    out = run(stream)
    check_contract(out)
    assert assemble(out)[0]["tool_calls"] == [{"id": "call_n", "type": "function", "name": name, "arguments": "{}"}]
