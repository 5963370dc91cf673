"""The Messages API's block builder, driven by Steps without a server: a stream accumulated by
the `anthropic` SDK's own accumulator is exactly the non-streamed message, whatever the split;
stop reasons; thinking signatures; and the request conversion a local SmolLM2 cannot show."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message as SDKMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.api.anthropic.input import chat_request
from toolserve.api.anthropic.output import MessagesRun, signature, stop_reason
from toolserve.api.anthropic.schemas import MessagesRequest
from toolserve.serving.conversation import Step
from toolserve.serving.pipeline import Finish
from toolserve.types import ContentDelta, Delta, ReasoningDelta, ToolCall, ToolCallArgs, ToolCallStart, Usage

DELTA_BLOCK = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "thinking", "input_json_delta": "tool_use"}


async def _steps(steps: list[Step]) -> AsyncIterator[Step]:
    for s in steps:
        yield s


def run(steps: list[Step]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stream's events (as JSON on the wire) and the whole message, from two runs."""

    async def go() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        events = [e async for e in MessagesRun(_steps(steps), "claude-x", 17).events()]
        whole = await MessagesRun(_steps(steps), "claude-x", 17).complete()
        return [json.loads(json.dumps(e)) for e in events], json.loads(json.dumps(whole))

    return asyncio.run(go())


def accumulate(events: list[dict[str, Any]]) -> dict[str, Any]:
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for e in events:
        if e["type"] != "ping":
            snapshot = accumulate_event(event=e, current_snapshot=snapshot, json_bufs=bufs)  # type: ignore[arg-type]
    return comparable(snapshot)


def comparable(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = m.model_dump(mode="json", exclude_none=True)
    out.pop("id")
    return out


def check_protocol(events: list[dict[str, Any]]) -> None:
    """What the SDK's accumulator lets pass but clients rely on: one block open at a time,
    indices in order, deltas of the open block's type, a thinking block's signature right
    before its stop, and a new block only where the kind of content changes."""
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    types: list[str] = []
    open_: int | None = None
    for prev, e in itertools.pairwise(events):
        if e["type"] == "content_block_start":
            assert open_ is None and e["index"] == len(types)
            kind = e["content_block"]["type"]
            assert not types or kind == "tool_use" or kind != types[-1]  # same kind twice: one block
            types.append(kind)
            open_ = e["index"]
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_ and DELTA_BLOCK[e["delta"]["type"]] == types[open_]
            assert prev["type"] != "content_block_delta" or prev["delta"]["type"] != "signature_delta"
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_
            signed = prev["type"] == "content_block_delta" and prev["delta"]["type"] == "signature_delta"
            assert signed == (types[open_] == "thinking")
            open_ = None
    assert open_ is None


# one segment of an answer: reasoning, text, or a tool call with its arguments object
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
SEGMENT = st.one_of(
    st.tuples(st.just("reasoning"), st.text(max_size=30)),
    st.tuples(st.just("text"), st.text(max_size=30)),
    st.tuples(st.just("call"), st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.dictionaries(st.text(max_size=6), JSON, max_size=4)),
)


def split(draw: Any, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def answers(draw: Any) -> list[Step]:
    """The Steps of an answer: its deltas split anywhere, grouped into steps anyhow, a Finish last."""
    deltas: list[Delta] = []
    calls = 0
    for seg in draw(st.lists(SEGMENT, max_size=6)):
        if seg[0] == "call":
            deltas.append(ToolCallStart(calls, f"call_{calls}", seg[1]))
            deltas += [ToolCallArgs(calls, f) for f in split(draw, json.dumps(seg[2], ensure_ascii=False)) if f]
            calls += 1
        else:
            kind = ReasoningDelta if seg[0] == "reasoning" else ContentDelta
            deltas += [kind(f) for f in split(draw, seg[1])]
    sizes = draw(st.lists(st.integers(0, 4), min_size=len(deltas), max_size=len(deltas)))
    steps, i = [], 0
    for n in sizes:
        if i < len(deltas):
            steps.append(Step(deltas[i : i + n]))
            i += n
    steps += [Step(deltas[i:])]
    reason = draw(st.sampled_from(["stop", "length", "tool_calls"] if calls else ["stop", "length"]))
    usage = Usage(17, draw(st.integers(0, 500)), draw(st.integers(0, 17)))
    return [*steps, Step([], [], Finish(reason, usage, stop_sequence=draw(st.none() | st.just("\n\n"))))]


@settings(max_examples=400, deadline=None)
@given(answers())
def test_stream_accumulates_to_the_message(steps: list[Step]) -> None:
    events, whole = run(steps)
    check_protocol(events)
    assert accumulate(events) == comparable(SDKMessage.model_validate(whole))


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        (Finish("tool_calls", Usage(1, 1)), ("tool_use", None)),
        (Finish("length", Usage(1, 1)), ("max_tokens", None)),
        (Finish("length", Usage(1, 1), stop_sequence=None), ("max_tokens", None)),
        (Finish("stop", Usage(1, 1), stop_sequence="END"), ("stop_sequence", "END")),
        (Finish("stop", Usage(1, 1)), ("end_turn", None)),
    ],
)
def test_stop_reason(finish: Finish, expected: tuple[str, str | None]) -> None:
    assert stop_reason(finish) == expected
    _, whole = run([Step([ContentDelta("hi")]), Step([], [], finish)])
    assert (whole["stop_reason"], whole["stop_sequence"]) == expected


def test_thinking_blocks_are_signed() -> None:
    steps = [
        Step([ReasoningDelta("Let me "), ReasoningDelta("think.")]),
        Step([ContentDelta("Hello")]),
        Step([ReasoningDelta("")]),  # an empty piece opens no block
        Step([ReasoningDelta("More.")]),
        Step([], [], Finish("stop", Usage(5, 4, 2))),
    ]
    events, whole = run(steps)
    check_protocol(events)
    assert [b["type"] for b in whole["content"]] == ["thinking", "text", "thinking"]
    first = whole["content"][0]
    assert first["thinking"] == "Let me think." and first["signature"] == signature("Let me think.") != ""
    assert whole["content"][2]["signature"] == signature("More.")
    assert signature("") != ""  # even an empty thought is signed
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    # Anthropic counts cache reads apart from input_tokens
    assert whole["usage"] == {"input_tokens": 3, "output_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2}


def test_empty_answer_and_argumentless_call() -> None:
    _, whole = run([Step([], [], Finish("stop", Usage(3, 1)))])
    assert whole["content"] == [] and whole["stop_reason"] == "end_turn"
    events, whole = run([Step([ToolCallStart(0, "call_abc", "now")]), Step([], [], Finish("tool_calls", Usage(3, 2)))])
    assert whole["content"] == [{"type": "tool_use", "id": "toolu_abc", "name": "now", "input": {}}]
    assert accumulate(events) == comparable(SDKMessage.model_validate(whole))


# -- the request side -----------------------------------------------------------------------------
def convert(**body: Any) -> Any:
    return chat_request(MessagesRequest.model_validate({"model": "claude-x", "max_tokens": 8, **body}))


def test_history_blocks_become_neutral_messages() -> None:
    req = convert(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "redacted_thinking", "data": "zz"},
                {"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": "é"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "oops"}], "is_error": True},
                {"type": "text", "text": "and now?"},
            ]},
        ],
        thinking={"type": "enabled", "budget_tokens": 2048},
        stop_sequences=["END"],
    )
    system, user, assistant, result, follow = req.messages
    assert (system.role, system.content) == ("system", "Be brief.\nBe kind.")
    assert user.content == "a\nb<__media__>"
    assert [(i.where, i.url) for i in req.images] == [("messages[0].content[2]", "data:image/png;base64,QUJD")]
    assert (assistant.content, assistant.reasoning) == ("Checking.", "hmm")
    assert assistant.tool_calls == (ToolCall("toolu_1", "f", '{"x": "é"}'),)
    assert (result.role, result.tool_call_id, result.content) == ("tool", "toolu_1", "Error: oops")
    assert (follow.role, follow.content) == ("user", "and now?")
    assert req.options.template_kwargs == {"enable_thinking": True}
    assert req.stops == ("END",) and req.max_tokens == 8
    assert req.param_names["stop"] == "stop_sequences"


@pytest.mark.parametrize(
    ("choice", "tool_choice", "name", "parallel"),
    [
        (None, "auto", None, True),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", None, False),
        ({"type": "any"}, "required", None, True),
        ({"type": "tool", "name": "f"}, "function", "f", True),
        ({"type": "none"}, "none", None, True),
    ],
)
def test_tool_choice(choice: Any, tool_choice: str, name: str | None, parallel: bool) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web_search"}]
    opts = convert(messages=[{"role": "user", "content": "hi"}], tools=tools, **({"tool_choice": choice} if choice else {})).options
    assert [t.name for t in opts.tools] == ["f"]  # the server tool is dropped
    assert (opts.tool_choice, opts.tool_name, opts.parallel_tool_calls) == (tool_choice, name, parallel)


@pytest.mark.parametrize(("thinking", "kwargs"), [({"type": "disabled"}, {"enable_thinking": False}), ({"type": "adaptive"}, {}), (None, {})])
def test_thinking_config(thinking: Any, kwargs: dict[str, Any]) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], **({"thinking": thinking} if thinking else {})}
    assert convert(**body).options.template_kwargs == kwargs
