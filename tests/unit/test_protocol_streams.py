"""Every protocol's stream rebuilds its whole response, whatever the split of the model's output.

The parser fixtures of every family (tests/unit/formats) are split at random points, parsed
into deltas, and rendered by each adapter (chat completions chunks, Responses events, Messages events) through
a stand-in conversation. A strict client-side reducer (for Anthropic's, the `anthropic` SDK's
own accumulator) folds the stream; the result must equal
the adapter's non-streamed response to the unsplit output, and say what the fixture expects.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.types import Message as SDKMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.formats.formats_fixtures import TOOLS, Case
from tests.unit.formats.test_formats_conformance import APPLICABLE, IDS
from tests.unit.test_anthropic_stream import accumulate, check_protocol, comparable
from toolserve.api.anthropic.output import MessagesRun
from toolserve.api.ollama.routes import OllamaRun
from toolserve.api.openai.chat import ChatRun
from toolserve.api.openai.schemas import ChatCompletionRequest
from toolserve.api.responses.input import ResponsesRequest, ToolNames
from toolserve.api.responses.routes import ResponseRun
from toolserve.api.responses.store import ResponseStore
from toolserve.formats.registry import FORMATS
from toolserve.serving.chat import ChatOptions
from toolserve.serving.conversation import ChatRequest, Step
from toolserve.serving.pipeline import Finish
from toolserve.types import Delta, Usage

Json = dict[str, Any]


class FakeConversation:
    """What an adapter reads of a Conversation: steps of a choice, and the model's names."""

    model_id = "m"
    fingerprint = "fp_test"

    def __init__(self, pieces: list[list[Delta]], reason: str = "stop"):
        self.pieces = pieces
        self.reason = reason
        self.req = ChatRequest(messages=(), options=ChatOptions(tools=tuple(TOOLS)))

    async def choice(self, i: int) -> AsyncIterator[Step]:
        calls = False
        for deltas in self.pieces:
            calls = calls or any(type(d).__name__ == "ToolCallStart" for d in deltas)
            if deltas:
                yield Step(deltas)
        yield Step([], [], Finish("tool_calls" if calls else self.reason, Usage(7, 5, 2)))


def pieces_of(fmt_id: str, case: Case, cuts: list[int]) -> list[list[Delta]]:
    """The deltas the family's parser gives for each piece of the text cut at `cuts`, and at
    the end of the output."""
    bounds = [0, *sorted(set(cuts)), len(case.text)]
    parser = FORMATS[fmt_id].new_parser(TOOLS, thinking_open=case.thinking_open)
    out = [parser.feed(case.text[a:b]) for a, b in itertools.pairwise(bounds) if b > a]
    return [*out, parser.finish()]


def collect(agen: AsyncIterator[Json]) -> list[Json]:
    async def go() -> list[Json]:
        return [x async for x in agen]

    return asyncio.run(go())


def strip_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_ids(v) for k, v in value.items() if k not in ("id", "item_id", "call_id", "created_at", "created")}
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value


# ---- OpenAI Responses ------------------------------------------------------------------------


def reduce_responses(events: list[Json]) -> Json:
    """Fold Responses stream events as a strict client does; returns the final response."""
    items: list[Json] = []
    final: Json | None = None
    for n, ev in enumerate(events):
        assert ev["sequence_number"] == n
        kind = ev["type"]
        oi = ev.get("output_index")
        if kind in ("response.created", "response.in_progress"):
            assert ev["response"]["status"] == "in_progress" and ev["response"]["output"] == []
        elif kind == "response.output_item.added":
            assert oi == len(items) and ev["item"]["status"] == "in_progress"
            items.append(copy.deepcopy(ev["item"]))
        elif kind == "response.content_part.added":
            assert ev["item_id"] == items[oi]["id"] and ev["content_index"] == len(items[oi]["content"])
            items[oi]["content"].append(copy.deepcopy(ev["part"]))
        elif kind == "response.output_text.delta":
            assert ev["item_id"] == items[oi]["id"] and ev["delta"]
            items[oi]["content"][ev["content_index"]]["text"] += ev["delta"]
        elif kind == "response.output_text.done":
            assert items[oi]["content"][ev["content_index"]]["text"] == ev["text"]
        elif kind == "response.content_part.done":
            assert items[oi]["content"][ev["content_index"]] == ev["part"]
        elif kind == "response.reasoning_summary_part.added":
            items[oi]["summary"].append(copy.deepcopy(ev["part"]))
        elif kind == "response.reasoning_summary_text.delta":
            items[oi]["summary"][ev["summary_index"]]["text"] += ev["delta"]
        elif kind in ("response.reasoning_summary_text.done", "response.reasoning_summary_part.done"):
            assert items[oi]["summary"][ev["summary_index"]]["text"] == ev.get("text", ev.get("part", {}).get("text"))
        elif kind == "response.function_call_arguments.delta":
            items[oi]["arguments"] += ev["delta"]
        elif kind == "response.function_call_arguments.done":
            assert items[oi]["arguments"] == ev["arguments"]
        elif kind == "response.custom_tool_call_input.done":
            items[oi]["input"] = ev["input"]
        elif kind == "response.output_item.done":
            assert {**items[oi], "status": "completed"} == ev["item"]
            items[oi] = ev["item"]
        elif kind in ("response.completed", "response.incomplete"):
            assert n == len(events) - 1
            final = ev["response"]
        else:
            raise AssertionError(f"unexpected event {kind}")
    assert final is not None and final["output"] == items
    return final


def responses_run(pieces: list[list[Delta]], reason: str = "stop") -> ResponseRun:
    req = ResponsesRequest(model="m", input="hi", store=False)
    return ResponseRun(FakeConversation(pieces, reason), req, ToolNames(), ResponseStore(), [])  # type: ignore[arg-type]


def responses_summary(response: Json) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
    content = "".join(i["content"][0]["text"] for i in response["output"] if i["type"] == "message")
    reasoning = "".join(i["summary"][0]["text"] for i in response["output"] if i["type"] == "reasoning")
    calls = tuple((i["name"], json.loads(i["arguments"])) for i in response["output"] if i["type"] == "function_call")
    return content, reasoning, calls


# ---- OpenAI chat completions -----------------------------------------------------------------


def reduce_chat(chunks: list[Json]) -> Json:
    """Concatenate chat chunks as a client does: the message of choice 0 and its finish."""
    msg: Json = {"role": None, "content": "", "reasoning_content": "", "tool_calls": {}}
    finish = None
    for c in chunks:
        for ch in c["choices"]:
            d = ch["delta"]
            msg["role"] = d.get("role", msg["role"])
            msg["content"] += d.get("content") or ""
            msg["reasoning_content"] += d.get("reasoning_content") or ""
            for call in d.get("tool_calls") or []:
                slot = msg["tool_calls"].setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
                fn = call.get("function", {})
                if "id" in call:
                    assert slot["id"] is None, "id once per call"
                    slot["id"], slot["name"] = call["id"], fn["name"]
                slot["arguments"] += fn.get("arguments") or ""
            finish = ch["finish_reason"] or finish
    return {**msg, "tool_calls": [msg["tool_calls"][i] for i in sorted(msg["tool_calls"])], "finish": finish}


def chat_whole(body: Json) -> Json:
    m = body["choices"][0]["message"]
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m.get("tool_calls", [])]
    return {"role": "assistant", "content": m["content"] or "", "reasoning_content": m.get("reasoning_content", ""),
            "tool_calls": calls, "finish": body["choices"][0]["finish_reason"]}


def chat_run(pieces: list[list[Delta]]) -> ChatRun:
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    return ChatRun(FakeConversation(pieces), req)  # type: ignore[arg-type]


# ---- Ollama ----------------------------------------------------------------------------------


def reduce_ollama(chunks: list[Json]) -> Json:
    """Fold Ollama's chat chunks as its clients do: content and thinking appended, each chunk's
    tool calls added to the list, the last (done) chunk's counters kept."""
    msg: Json = {"role": "assistant", "content": "", "thinking": "", "tool_calls": []}
    assert [c["done"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    for c in chunks:
        m = c["message"]
        assert m["role"] == "assistant" and isinstance(m["content"], str)
        msg["content"] += m["content"]
        msg["thinking"] += m.get("thinking", "")
        msg["tool_calls"] += m.get("tool_calls", [])
    last = {k: v for k, v in chunks[-1].items() if k not in ("message", "created_at", "total_duration")}
    return {**last, "message": msg}


def ollama_whole(body: Json) -> Json:
    m = body["message"]
    out = {k: v for k, v in body.items() if k not in ("message", "created_at", "total_duration")}
    return {**out, "message": {"role": m["role"], "content": m["content"], "thinking": m.get("thinking", ""), "tool_calls": m.get("tool_calls", [])}}


def ollama_run(pieces: list[list[Delta]]) -> OllamaRun:
    return OllamaRun(FakeConversation(pieces).choice(0), "m:latest", 0.0, 0.0, chat=True)


@pytest.mark.parametrize(("fmt_id", "name", "case"), APPLICABLE, ids=IDS)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_streams_rebuild_the_whole_response(fmt_id: str, name: str, case: Case, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(case.text)), max_size=12))
    split, whole = pieces_of(fmt_id, case, cuts), pieces_of(fmt_id, case, [])
    expected_calls = tuple((n, a) for n, a, _ in case.calls)

    streamed = reduce_responses(collect(responses_run(split).events()))
    complete = asyncio.run(responses_run(whole).complete())
    assert strip_ids(streamed) == strip_ids(complete)
    assert responses_summary(complete) == (case.content, case.reasoning, expected_calls)

    chunks = reduce_chat(collect(chat_run(split).stream()))
    body = chat_whole(asyncio.run(chat_run(whole).complete()))
    assert strip_ids(chunks) == strip_ids(body)
    assert (body["content"], body["reasoning_content"]) == (case.content, case.reasoning)
    assert tuple((c["name"], json.loads(c["arguments"])) for c in body["tool_calls"]) == expected_calls

    events = collect(MessagesRun(FakeConversation(split).choice(0), "m", 7).events())
    message = asyncio.run(MessagesRun(FakeConversation(whole).choice(0), "m", 7).complete())
    check_protocol(events)
    assert strip_ids(accumulate(events)) == strip_ids(comparable(SDKMessage.model_validate(message)))
    blocks = message["content"]
    assert "".join(b["text"] for b in blocks if b["type"] == "text") == case.content
    assert "".join(b["thinking"] for b in blocks if b["type"] == "thinking") == case.reasoning
    assert tuple((b["name"], b["input"]) for b in blocks if b["type"] == "tool_use") == expected_calls

    folded = reduce_ollama(collect(ollama_run(split).stream()))
    whole_ollama = ollama_whole(asyncio.run(ollama_run(whole).complete()))
    assert strip_ids(folded) == strip_ids(whole_ollama)
    m = whole_ollama["message"]
    assert (m["content"], m["thinking"]) == (case.content, case.reasoning)
    assert tuple((c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]) == expected_calls
    assert [c["function"]["index"] for c in m["tool_calls"]] == list(range(len(expected_calls)))
    assert whole_ollama["prompt_eval_count"] == 7 and whole_ollama["eval_count"] == 5


@pytest.mark.parametrize(("reason", "status", "incomplete"), [("stop", "completed", None), ("length", "incomplete", {"reason": "max_output_tokens"})])
def test_responses_status_follows_the_finish(reason: str, status: str, incomplete: Json | None) -> None:
    from toolserve.types import ContentDelta

    events = collect(responses_run([[ContentDelta("Hi")]], reason).events())
    assert events[-1]["type"] == f"response.{status}"
    final = events[-1]["response"]
    assert final["status"] == status and final["incomplete_details"] == incomplete
    assert final["usage"] == {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12}
