"""The Responses API's output: items built from a conversation's deltas (and the MCP calls the
server ran), and the stream events that announce them.

One `OutputBuilder` holds the items; the whole response is what it holds at the end, so a stream
and a non-streamed answer to the same model output are the same response.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from toolserve.api.responses.input import ToolNames
from toolserve.mcp.client import CallResult
from toolserve.types import ContentDelta, Delta, Message, ReasoningDelta, ToolCall, ToolCallArgs, ToolCallStart, Usage

Json = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """Output items from deltas, and the events that announce them. An item is open while
    deltas of its kind arrive; another kind closes it (reasoning, message, each call)."""

    def __init__(self, names: ToolNames):
        self.names = names
        self.items: list[Json] = []
        self.open: Json | None = None
        self.calls: dict[int, Json] = {}  # the model's call index -> its item, in this turn
        self.to_run: list[Json] = []  # mcp_call items whose arguments are complete, not run yet
        self.turn_start = 0  # the first item of this turn (one generation)
        self.seq = 0

    def next_turn(self) -> None:
        self.calls, self.to_run, self.turn_start = {}, [], len(self.items)

    def _ev(self, kind: str, **fields: Any) -> Json:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def _close(self, status: str = "completed") -> list[Json]:
        item, self.open = self.open, None
        if item is None:
            return []
        at = {"item_id": item["id"], "output_index": self.items.index(item)}
        out = []
        item["status"] = status
        if item["type"] == "message":
            text = item["content"][0]["text"]
            out += [self._ev("response.output_text.done", **at, content_index=0, text=text, logprobs=[]),
                    self._ev("response.content_part.done", **at, content_index=0, part=dict(item["content"][0]))]
        elif item["type"] == "reasoning":
            text = item["summary"][0]["text"]
            out += [self._ev("response.reasoning_summary_text.done", **at, summary_index=0, text=text),
                    self._ev("response.reasoning_summary_part.done", **at, summary_index=0, part=dict(item["summary"][0]))]
        elif item["type"] == "function_call":
            out.append(self._ev("response.function_call_arguments.done", **at, arguments=item["arguments"], name=item["name"]))
        elif item["type"] == "mcp_call":  # done once it has run (ran)
            item["status"] = "in_progress"
            self.to_run.append(item)
            return [*out, self._ev("response.mcp_call_arguments.done", **at, arguments=item["arguments"])]
        elif item["type"] == "mcp_approval_request":
            del item["status"]
        else:  # custom_tool_call: its input is the string inside the arguments the model wrote
            item["input"] = self._custom_input(item.pop("_arguments"))
            out.append(self._ev("response.custom_tool_call_input.done", **at, input=item["input"]))
        out.append(self._ev("response.output_item.done", output_index=at["output_index"], item=self.public(item)))
        return out

    @staticmethod
    def _custom_input(arguments: str) -> str:
        try:
            value = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return arguments
        return str(value.get("input", "")) if isinstance(value, dict) else arguments

    @staticmethod
    def public(item: Json) -> Json:
        return {k: v for k, v in item.items() if not k.startswith("_")}

    def _start(self, item: Json) -> list[Json]:
        out = self._close()
        self.items.append(item)
        self.open = item
        index = len(self.items) - 1
        out.append(self._ev("response.output_item.added", output_index=index, item=json.loads(json.dumps(self.public(item)))))
        return out

    def feed(self, d: Delta) -> list[Json]:
        out: list[Json] = []
        if isinstance(d, ReasoningDelta | ContentDelta):
            kind = "reasoning" if isinstance(d, ReasoningDelta) else "message"
            if self.open is None or self.open["type"] != kind:
                out += self._open_text(kind)
            assert self.open is not None
            at = {"item_id": self.open["id"], "output_index": len(self.items) - 1}
            if kind == "message":
                self.open["content"][0]["text"] += d.text
                out.append(self._ev("response.output_text.delta", **at, content_index=0, delta=d.text, logprobs=[]))
            else:
                self.open["summary"][0]["text"] += d.text
                out.append(self._ev("response.reasoning_summary_text.delta", **at, summary_index=0, delta=d.text))
        elif isinstance(d, ToolCallStart) and d.name in self.names.mcp:
            mcp = self.names.mcp[d.name]
            kind = "mcp_approval_request" if mcp.approval else "mcp_call"
            made: Json = {"id": new_id("mcpr" if mcp.approval else "mcp"), "type": kind, "status": "in_progress",
                          "server_label": mcp.label, "name": mcp.name, "arguments": "", "_flat": d.name}
            if not mcp.approval:
                made.update(output=None, error=None, approval_request_id=None)
            self.calls[d.index] = made
            out += self._start(made)
        elif isinstance(d, ToolCallStart):
            name, namespace, custom = self.names.origin(d.name)
            item: Json = {"id": new_id("ctc" if custom else "fc"), "type": "custom_tool_call" if custom else "function_call",
                          "status": "in_progress", "call_id": d.id, "name": name}
            if custom:
                item.update(input="", _arguments="")
            else:
                item["arguments"] = ""
            if namespace:
                item["namespace"] = namespace
            self.calls[d.index] = item
            out += self._start(item)
        elif isinstance(d, ToolCallArgs):
            item = self.calls[d.index]
            if item["type"] == "custom_tool_call":
                item["_arguments"] += d.fragment  # a JSON text until the call closes: no input deltas
            elif item["type"] == "mcp_approval_request":
                item["arguments"] += d.fragment  # the item is sent whole when done
            else:
                item["arguments"] += d.fragment
                at = {"item_id": item["id"], "output_index": self.items.index(item)}
                kind = "mcp_call_arguments" if item["type"] == "mcp_call" else "function_call_arguments"
                out.append(self._ev(f"response.{kind}.delta", **at, delta=d.fragment))
        return out

    def _open_text(self, kind: str) -> list[Json]:
        if kind == "message":
            part: Json = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item: Json = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant", "content": []}
            out = self._start(item)
            item["content"].append(part)
            out.append(self._ev("response.content_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                                content_index=0, part=dict(part)))
            return out
        item = {"id": new_id("rs"), "type": "reasoning", "summary": [], "status": "in_progress"}
        out = self._start(item)
        part = {"type": "summary_text", "text": ""}
        item["summary"].append(part)
        out.append(self._ev("response.reasoning_summary_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                            summary_index=0, part=dict(part)))
        return out

    def finish(self, status: str = "completed") -> list[Json]:
        """The open item done (`incomplete`: the answer failed while it was being written)."""
        return self._close(status)

    def ran(self, item: Json, result: CallResult) -> list[Json]:
        """The events of an MCP call that has run, the item done with its output or error."""
        at = {"item_id": item["id"], "output_index": self.items.index(item)}
        failed = result.error is not None
        item.update(status="failed" if failed else "completed", output=result.output, error=result.error)
        return [self._ev("response.mcp_call.in_progress", **at),
                self._ev(f"response.mcp_call.{'failed' if failed else 'completed'}", **at),
                self._ev("response.output_item.done", output_index=at["output_index"], item=self.public(item))]

    def cut(self) -> list[Json]:
        """The MCP calls max_output_tokens cut short: done, incomplete, never run."""
        out = []
        for item in self.to_run:
            item["status"] = "incomplete"
            out.append(self._ev("response.output_item.done", output_index=self.items.index(item), item=self.public(item)))
        self.to_run = []
        return out

    def whole(self, item: Json) -> list[Json]:
        """The events of an item made whole before the first generation (a listing, an approved call)."""
        self.items.append(item)
        at = {"item_id": item["id"], "output_index": len(self.items) - 1}
        kind = item["type"]
        shown = {**item, "tools": []} if kind == "mcp_list_tools" else {**item, "status": "in_progress", "output": None, "error": None}
        ok = item.get("error") is None
        step = "mcp_list_tools" if kind == "mcp_list_tools" else "mcp_call"
        return [self._ev("response.output_item.added", output_index=at["output_index"], item=shown),
                self._ev(f"response.{step}.in_progress", **at),
                self._ev(f"response.{step}.{'completed' if ok else 'failed'}", **at),
                self._ev("response.output_item.done", output_index=at["output_index"], item=dict(item))]

    def as_messages(self, since: int = 0) -> list[Message]:
        """The output from item `since` on as chat history (the next turn's, a later
        previous_response_id's)."""
        content, reasoning, calls = [], [], []
        for item in self.items[since:]:
            if item["type"] == "message":
                content.append(item["content"][0]["text"])
            elif item["type"] == "reasoning":
                reasoning.append(item["summary"][0]["text"])
            elif item["type"] in ("mcp_call", "mcp_approval_request"):
                if "_flat" in item:  # made by the model in this response, not an approved call
                    calls.append(ToolCall(item["id"], item["_flat"], item["arguments"]))
            elif item["type"] == "mcp_list_tools":
                continue
            else:
                args = item.get("arguments") if item["type"] == "function_call" else json.dumps({"input": item.get("input", "")})
                calls.append(ToolCall(item["call_id"], self.names.flat(item["name"], item.get("namespace")), str(args)))
        text = "".join(content)
        return [Message(role="assistant", content=text or None, tool_calls=tuple(calls), reasoning="".join(reasoning) or None)]


def usage_json(u: Usage) -> Json:
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    }
