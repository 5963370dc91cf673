"""A conversation's steps as Anthropic Messages: one `Blocks` builder turns the deltas into
content blocks and the stream events that build them, so a streamed message accumulates to
exactly the non-streamed one (the adapter's last step)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from toolserve.api.errors import anthropic_error, error_of
from toolserve.errors import ToolserveError
from toolserve.serving.conversation import Step
from toolserve.serving.pipeline import Finish
from toolserve.types import (
    Delta,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallStart,
    Usage,
)


def signature(thinking: str) -> str:
    """A thinking block's signature: the SHA-256 (hex) of its text. Clients such as Claude Code
    want a non-empty one to send back; nothing here checks it, since history's thinking is
    taken as the client sends it (a local model has no secret to sign with)."""
    return hashlib.sha256(thinking.encode()).hexdigest()


def tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


class Blocks:
    """An answer's content blocks, built from its deltas in the order the model made them. Each
    `add` returns the stream events it causes; a new block starts whenever the kind of delta
    changes (reasoning -> text -> tool call k)."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []  # as streamed; a tool_use keeps its JSON text in "_json"
        self._open: int | None = None  # index of the block that deltas go to
        self._calls: dict[int, int] = {}  # call index -> its block's index

    def add(self, d: Delta) -> list[dict[str, Any]]:
        if isinstance(d, ToolCallStart):
            block = {"type": "tool_use", "id": tool_use_id(d.id), "name": d.name, "input": {}}
            self._calls[d.index] = len(self.blocks)
            return [*self.close(), self._start(block)]
        if isinstance(d, ToolCallArgs):
            index = self._calls[d.index]  # the parsers send a call's arguments right after its start
            self.blocks[index]["_json"] += d.fragment
            return [self._delta(index, {"type": "input_json_delta", "partial_json": d.fragment})]
        if not d.text:
            return []  # an empty piece makes no block
        kind = "thinking" if isinstance(d, ReasoningDelta) else "text"  # the block's field and its delta's
        events = []
        if self._open is None or self.blocks[self._open]["type"] != kind:
            events = [*self.close(), self._start({"type": kind, kind: "", "signature": ""} if kind == "thinking" else {"type": kind, kind: ""})]
        self.blocks[-1][kind] += d.text
        return [*events, self._delta(len(self.blocks) - 1, {"type": f"{kind}_delta", kind: d.text})]

    def _start(self, block: dict[str, Any]) -> dict[str, Any]:
        self.blocks.append({**block, "_json": ""} if block["type"] == "tool_use" else dict(block))
        self._open = len(self.blocks) - 1
        return {"type": "content_block_start", "index": self._open, "content_block": block}

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": delta}

    def close(self) -> list[dict[str, Any]]:
        """The events that end the open block (a thinking block gets its signature first)."""
        index, self._open = self._open, None
        if index is None:
            return []
        block = self.blocks[index]
        if block["type"] != "thinking":
            return [{"type": "content_block_stop", "index": index}]
        block["signature"] = signature(block["thinking"])
        return [self._delta(index, {"type": "signature_delta", "signature": block["signature"]}), {"type": "content_block_stop", "index": index}]

    def content(self) -> list[dict[str, Any]]:
        """The blocks of the whole message: a call's input as the object its JSON text holds."""
        return [_finished(b) for b in self.blocks]


def _finished(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] != "tool_use":
        return block
    out = {k: v for k, v in block.items() if k != "_json"}
    try:  # the parsers close a call cut by max_tokens into valid JSON; anything else reads as {}
        value = json.loads(block["_json"]) if block["_json"] else {}
    except json.JSONDecodeError:
        value = {}
    out["input"] = value if isinstance(value, dict) else {}
    return out


def stop_reason(finish: Finish) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for how a choice ended."""
    if finish.finish_reason == "tool_calls":
        return "tool_use", None
    if finish.finish_reason == "length":
        return "max_tokens", None
    if finish.stop_sequence is not None:
        return "stop_sequence", finish.stop_sequence
    return "end_turn", None


def usage_json(u: Usage) -> dict[str, int]:
    """Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens is the prompt
    (clients such as Claude Code add them up to know how full the context is)."""
    return {
        "input_tokens": u.prompt_tokens - u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens,
    }


class MessagesRun:
    """One choice's Steps rendered as a Message: its stream events, or the whole message, from
    the same `Blocks`."""

    def __init__(self, steps: AsyncIterator[Step], model: str, prompt_tokens: int):
        self.steps, self.model, self.prompt_tokens = steps, model, prompt_tokens
        self.id = f"msg_{uuid.uuid4().hex}"
        self.blocks = Blocks()
        self.finish = Finish("stop", Usage(prompt_tokens, 0))

    def message(self, content: list[dict[str, Any]], reason: tuple[str, str | None] | None, usage: Usage) -> dict[str, Any]:
        stop, sequence = reason or (None, None)
        return {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
            "stop_reason": stop, "stop_sequence": sequence, "usage": usage_json(usage),
        }

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The stream: message_start, ping, each block's start, deltas and stop, message_delta, message_stop."""
        yield {"type": "message_start", "message": self.message([], None, Usage(self.prompt_tokens, 0))}
        yield {"type": "ping"}
        async for step in self.steps:
            for d in step.deltas:
                for event in self.blocks.add(d):
                    yield event
            if step.finish is not None:
                self.finish = step.finish
        for event in self.blocks.close():
            yield event
        stop, sequence = stop_reason(self.finish)
        usage = {k: v for k, v in usage_json(self.finish.usage).items() if k != "cache_creation_input_tokens"}
        yield {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": sequence}, "usage": usage}
        yield {"type": "message_stop"}

    async def complete(self) -> dict[str, Any]:
        """The whole message: the stream's events, accumulated by the same builder."""
        async for _ in self.events():
            pass
        return self.message(self.blocks.content(), stop_reason(self.finish), self.finish.usage)


def stream_error(exc: ToolserveError) -> dict[str, Any]:
    """A failure after the stream began: Anthropic's `error` event."""
    return anthropic_error(exc.status, error_of(exc)["error"]["message"])
