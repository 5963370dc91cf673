"""POST /v1/responses (OpenAI's Responses API), GET and DELETE /v1/responses/{id}.

One `OutputBuilder` turns a conversation's steps into output items and the stream's events:
the whole response is what the builder holds at the end, so a stream and a non-streamed
answer to the same model output are the same response. Codex reads calls from
`response.output_item.done` and fails without `response.completed`; both always come.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.errors import error_of
from toolserve.api.responses_input import ResponsesRequest, ToolNames, chat_request
from toolserve.api.responses_store import ResponseStore, Stored
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import ToolserveError
from toolserve.serving.conversation import Conversation, start_conversation
from toolserve.serving.pipeline import Finish
from toolserve.types import ContentDelta, Delta, Message, ReasoningDelta, ToolCall, ToolCallArgs, ToolCallStart, Usage

router = APIRouter()
Json = dict[str, Any]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """Output items from deltas, and the events that announce them. An item is open while
    deltas of its kind arrive; another kind closes it (reasoning, message, each call)."""

    def __init__(self, names: ToolNames):
        self.names = names
        self.items: list[Json] = []
        self.open: Json | None = None
        self.calls: dict[int, Json] = {}  # the model's call index -> its item
        self.seq = 0

    def _ev(self, kind: str, **fields: Any) -> Json:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **fields}

    def _close(self) -> list[Json]:
        item, self.open = self.open, None
        if item is None:
            return []
        at = {"item_id": item["id"], "output_index": self.items.index(item)}
        out = []
        item["status"] = "completed"
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
        elif isinstance(d, ToolCallStart):
            name, namespace, custom = self.names.origin(d.name)
            item: Json = {"id": _id("ctc" if custom else "fc"), "type": "custom_tool_call" if custom else "function_call",
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
            else:
                item["arguments"] += d.fragment
                at = {"item_id": item["id"], "output_index": self.items.index(item)}
                out.append(self._ev("response.function_call_arguments.delta", **at, delta=d.fragment))
        return out

    def _open_text(self, kind: str) -> list[Json]:
        if kind == "message":
            part: Json = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item: Json = {"id": _id("msg"), "type": "message", "status": "in_progress", "role": "assistant", "content": []}
            out = self._start(item)
            item["content"].append(part)
            out.append(self._ev("response.content_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                                content_index=0, part=dict(part)))
            return out
        item = {"id": _id("rs"), "type": "reasoning", "summary": [], "status": "in_progress"}
        out = self._start(item)
        part = {"type": "summary_text", "text": ""}
        item["summary"].append(part)
        out.append(self._ev("response.reasoning_summary_part.added", item_id=item["id"], output_index=len(self.items) - 1,
                            summary_index=0, part=dict(part)))
        return out

    def finish(self) -> list[Json]:
        return self._close()

    def as_messages(self) -> list[Message]:
        """The output as chat history, for a later previous_response_id."""
        content, reasoning, calls = [], [], []
        for item in self.items:
            if item["type"] == "message":
                content.append(item["content"][0]["text"])
            elif item["type"] == "reasoning":
                reasoning.append(item["summary"][0]["text"])
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


class ResponseRun:
    """One response: its envelope, its builder, and the stream or the whole of it."""

    def __init__(self, conv: Conversation, req: ResponsesRequest, names: ToolNames, store: ResponseStore, history: list[Message]):
        self.conv, self.req, self.store, self.history = conv, req, store, history
        self.builder = OutputBuilder(names)
        self.id = _id("resp")
        self.created = int(time.time())

    def envelope(self, status: str, finish: Finish | None = None, error: ToolserveError | None = None) -> Json:
        r, opts = self.req, self.conv.req.options
        reasoning = r.echoed("reasoning") or {}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "background": False,
            "error": None if error is None else {"code": error.code or error.type, "message": error_of(error)["error"]["message"]},
            "incomplete_details": {"reason": "max_output_tokens"} if finish and finish.finish_reason == "length" else None,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens, "metadata": r.metadata or {},
            "model": r.model or self.conv.model_id,
            "output": [self.builder.public(i) for i in self.builder.items if status != "in_progress" or i is not self.builder.open],
            "parallel_tool_calls": opts.parallel_tool_calls, "previous_response_id": r.previous_response_id,
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "store": r.store is not False, "temperature": r.temperature if r.temperature is not None else 1.0,
            "text": r.echoed("text") or {"format": {"type": "text"}}, "tool_choice": r.echoed("tool_choice") or "auto",
            "tools": r.echoed("tools") or [],
            "top_p": r.top_p if r.top_p is not None else 1.0, "truncation": r.truncation or "disabled",
            "usage": usage_json(finish.usage) if finish is not None else None, "user": r.user,
        }

    async def events(self, *, in_band: bool = True) -> AsyncIterator[Json]:
        """The stream's events; with `in_band`, an error mid-way ends it with response.failed
        (a stream's status is sent already), else it is raised."""
        b = self.builder
        start = self.envelope("in_progress")
        yield b._ev("response.created", response=start)
        yield b._ev("response.in_progress", response=start)
        finish: Finish | None = None
        try:
            async for step in self.conv.choice(0):
                for d in step.deltas:
                    for ev in b.feed(d):
                        yield ev
                finish = step.finish or finish
        except ToolserveError as exc:
            if not in_band:
                raise
            for ev in b.finish():
                yield ev
            yield b._ev("response.failed", response=self.envelope("failed", finish, exc))
            return
        for ev in b.finish():
            yield ev
        status = "incomplete" if finish is not None and finish.finish_reason == "length" else "completed"
        final = self.envelope(status, finish)
        self._keep(final)
        yield b._ev(f"response.{status}", response=final)

    async def complete(self) -> Json:
        final: Json = {}
        async for ev in self.events(in_band=False):
            if ev["type"] in ("response.completed", "response.incomplete"):
                final = ev["response"]
        return final

    def _keep(self, final: Json) -> None:
        if self.req.store is not False:
            self.store.put(Stored(final, tuple([*self.history, *self.builder.as_messages()])))


def _store(request: Request) -> ResponseStore:
    return request.app.state.responses  # type: ignore[no-any-return]


@router.post("/v1/responses")
async def create_response(req: ResponsesRequest, request: Request, registry: RegistryDep) -> Response:
    store = _store(request)
    history: tuple[Message, ...] = ()
    if req.previous_response_id:
        history = store.get(req.previous_response_id).messages
    neutral, names, conversation = chat_request(req, history)
    conv = await start_conversation(registry, neutral)
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    run = ResponseRun(conv, req, names, store, conversation)
    if req.stream:
        return sse_response(run.events(), on_close=conv.ticket.release, named=True, error=run_error(run))
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        conv.ticket.release()


def run_error(run: ResponseRun) -> Any:
    def shape(exc: ToolserveError) -> Json:
        return run.builder._ev("error", code=exc.code or exc.type, message=error_of(exc)["error"]["message"], param=exc.param)

    return shape


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Json:
    return _store(request).get(response_id).response


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Json:
    _store(request).delete(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}

