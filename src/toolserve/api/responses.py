"""POST /v1/responses (OpenAI's Responses API), GET and DELETE /v1/responses/{id}.

One `OutputBuilder` turns a conversation's steps into output items and the stream's events:
the whole response is what the builder holds at the end, so a stream and a non-streamed
answer to the same model output are the same response. Codex reads calls from
`response.output_item.done` and fails without `response.completed`; both always come.
"""

from __future__ import annotations

import dataclasses
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
from toolserve.api.responses_mcp import MAX_TURNS, McpRun, taken_names
from toolserve.api.responses_store import ResponseStore, Stored
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import InvalidRequest, ToolserveError
from toolserve.mcp.client import CallResult
from toolserve.serving.conversation import ChatRequest, Conversation, start_conversation
from toolserve.serving.pipeline import Finish
from toolserve.serving.registry import ModelRegistry
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
        self.calls: dict[int, Json] = {}  # the model's call index -> its item, in this turn
        self.to_run: list[Json] = []  # mcp_call items whose arguments are complete, not run yet
        self.turn_start = 0  # the first item of this turn (one generation)
        self.seq = 0

    def next_turn(self) -> None:
        self.calls, self.to_run, self.turn_start = {}, [], len(self.items)

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
            made: Json = {"id": _id("mcpr" if mcp.approval else "mcp"), "type": kind, "status": "in_progress",
                          "server_label": mcp.label, "name": mcp.name, "arguments": "", "_flat": d.name}
            if not mcp.approval:
                made.update(output=None, error=None, approval_request_id=None)
            self.calls[d.index] = made
            out += self._start(made)
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


class ResponseRun:
    """One response: its envelope, its builder, and the stream or the whole of it. With MCP
    tools it may take several generations (turns): the calls of one run on their servers, and
    the next generation reads their results, until the model answers, calls a function the
    client runs, waits for an approval, or MAX_TURNS is reached."""

    def __init__(self, conv: Conversation, req: ResponsesRequest, names: ToolNames, store: ResponseStore,
                 history: list[Message], *, registry: ModelRegistry | None = None, mcp: McpRun | None = None,
                 prior: Stored | None = None):
        self.conv, self.req, self.store, self.history = conv, req, store, history
        self.neutral: ChatRequest = conv.req  # the next turn's request grows from it
        self.registry, self.mcp, self.prior = registry, mcp, prior
        self.builder = OutputBuilder(names)
        self.id = _id("resp")
        self.created = int(time.time())
        self.usage = Usage(0, 0)  # of all the generations
        self.finish: Finish | None = None  # the last generation's
        self.calls_run = 0  # MCP calls, for max_tool_calls
        self.added: list[Message] = []  # the last turn and its calls' results, for the next generation
        self.settled = False  # the last turn is in `history` already

    def release(self) -> None:
        self.conv.ticket.release()

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
            "tools": [_redacted(t) for t in r.echoed("tools") or []],
            "top_p": r.top_p if r.top_p is not None else 1.0, "truncation": r.truncation or "disabled",
            "usage": usage_json(self.usage) if finish is not None else None, "user": r.user,
        }

    async def events(self, *, in_band: bool = True) -> AsyncIterator[Json]:
        """The stream's events; with `in_band`, an error mid-way ends it with response.failed
        (a stream's status is sent already), else it is raised."""
        b = self.builder
        start = self.envelope("in_progress")
        yield b._ev("response.created", response=start)
        yield b._ev("response.in_progress", response=start)
        for item in self.mcp.new_items if self.mcp else []:  # listed, or approved and run, before generating
            for ev in b.whole(item):
                yield ev
        try:
            for turn in range(1, MAX_TURNS + 1):
                async for ev in self._generation():
                    yield ev
                if not b.to_run:
                    break
                if self.finish is None or self.finish.finish_reason == "length":  # a call cut short does not run
                    for ev in b.cut():
                        yield ev
                    break
                async for ev in self._run_calls():
                    yield ev
                if self._clients_turn():
                    break
                nxt = self._next_turn(turn)
                if nxt is None:  # max_output_tokens spent
                    self.finish = dataclasses.replace(self.finish, finish_reason="length")
                    break
                assert self.registry is not None
                self.conv = await start_conversation(self.registry, nxt)
        except ToolserveError as exc:
            if not in_band:
                raise
            for ev in b.finish():
                yield ev
            yield b._ev("response.failed", response=self.envelope("failed", self.finish, exc))
            return
        for ev in b.finish():
            yield ev
        status = "incomplete" if self.finish is not None and self.finish.finish_reason == "length" else "completed"
        final = self.envelope(status, self.finish)
        self._keep(final)
        yield b._ev(f"response.{status}", response=final)

    async def _generation(self) -> AsyncIterator[Json]:
        """One generation's events; its finish in `self.finish`, its usage added up."""
        b = self.builder
        b.next_turn()
        self.finish, self.settled = None, False
        async for step in self.conv.choice(0):
            for d in step.deltas:
                for ev in b.feed(d):
                    yield ev
            self.finish = step.finish or self.finish
        for ev in b.finish():
            yield ev
        if self.finish is not None:
            u, total = self.finish.usage, self.usage
            self.usage = Usage(total.prompt_tokens + u.prompt_tokens, total.completion_tokens + u.completion_tokens,
                               total.cached_tokens + u.cached_tokens)

    async def _run_calls(self) -> AsyncIterator[Json]:
        """The MCP calls of this generation, one after another; the turn and the results join
        the conversation."""
        assert self.mcp is not None
        b = self.builder
        self.release()  # another request may use the model while the calls run
        results = []
        for item in b.to_run:
            result = await self.mcp.call(item["server_label"], item["name"], item["arguments"])
            self.calls_run += 1
            results.append(Message(role="tool", content=result.text, tool_call_id=item["id"]))
            for ev in b.ran(item, result):
                yield ev
        self.history = [*self.history, *b.as_messages(b.turn_start)]
        self.added = [*self.history[-1:], *results]
        self.history += results
        self.settled = True

    def _clients_turn(self) -> bool:
        """Whether the generation also made calls the client answers (functions, approvals)."""
        assistant = self.added[0]
        return any(c.id not in {m.tool_call_id for m in self.added[1:]} for c in assistant.tool_calls)

    def _next_turn(self, turn: int) -> ChatRequest | None:
        """The next generation's request: this one's with the calls and their results added;
        None when max_output_tokens is spent. The last turn allowed may call no tool."""
        n = self.neutral
        budget = None if n.max_tokens is None else n.max_tokens - self.usage.completion_tokens
        if budget is not None and budget <= 0:
            return None
        limit = self.req.max_tool_calls
        last = turn + 1 >= MAX_TURNS or (limit is not None and self.calls_run >= limit)
        options = dataclasses.replace(n.options, tool_choice="none" if last else "auto", tool_name=None)
        self.neutral = dataclasses.replace(n, messages=(*n.messages, *self.added), options=options, max_tokens=budget)
        return self.neutral

    async def complete(self) -> Json:
        final: Json = {}
        async for ev in self.events(in_band=False):
            if ev["type"] in ("response.completed", "response.incomplete"):
                final = ev["response"]
        return final

    def _keep(self, final: Json) -> None:
        if self.req.store is False:
            return
        b = self.builder
        lists = {**(self.prior.mcp_lists if self.prior else {}), **(self.mcp.known if self.mcp else {})}
        pending = {**(self.prior.approvals if self.prior else {})}
        pending.update({i["id"]: b.public(i) for i in b.items if i["type"] == "mcp_approval_request"})
        messages = [*self.history, *([] if self.settled else b.as_messages(b.turn_start))]
        self.store.put(Stored(final, tuple(messages), mcp_lists=lists, approvals=pending))


def _redacted(tool: Json) -> Json:
    """An echoed tool without what may be a secret: an mcp tool's headers and token."""
    if tool.get("type") != "mcp":
        return tool
    return {k: v for k, v in tool.items() if k not in ("headers", "authorization")}


def _store(request: Request) -> ResponseStore:
    return request.app.state.responses  # type: ignore[no-any-return]


@router.post("/v1/responses")
async def create_response(req: ResponsesRequest, request: Request, registry: RegistryDep) -> Response:
    store = _store(request)
    prior = store.get(req.previous_response_id) if req.previous_response_id else None
    history = prior.messages if prior else ()
    names = ToolNames()
    mcp = await McpRun.prepare(req, getattr(request.app.state, "mcp", None), dict(prior.mcp_lists) if prior else {})
    taken = taken_names(req)
    offered = mcp.offer(names, set(taken)) if mcp else ()
    if mcp:
        mcp.check_choice(names, req.tool_choice, bool(taken))
    neutral, names, conversation = chat_request(req, history, names, offered)
    if names.approvals:
        if mcp is None:
            raise InvalidRequest("input holds an mcp_approval_response, but tools holds no mcp tool to run it.", param="tools")
        skip = len(neutral.messages) - len(conversation)  # the instructions, in front
        prompt = list(neutral.messages)
        for at, text, _ in await mcp.answer(names, dict(prior.approvals) if prior else {}):
            conversation[at] = prompt[at + skip] = dataclasses.replace(conversation[at], content=text)
        neutral = dataclasses.replace(neutral, messages=tuple(prompt))
    conv = await start_conversation(registry, neutral)
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    run = ResponseRun(conv, req, names, store, conversation, registry=registry, mcp=mcp, prior=prior)
    if req.stream:
        return sse_response(run.events(), on_close=run.release, named=True, error=run_error(run))
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        run.release()


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

