"""POST /v1/responses (OpenAI's Responses API), GET and DELETE /v1/responses/{id}.

A `ResponseRun` drives one response: the generations of its conversation through an
`OutputBuilder` (output.py), with the MCP calls of each run in between
(mcp.py). Codex reads calls from `response.output_item.done` and fails without
`response.completed`; both always come.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.errors import error_of
from toolserve.api.responses.input import ResponsesRequest, ToolNames, chat_request
from toolserve.api.responses.mcp import MAX_TURNS, McpRun, taken_names
from toolserve.api.responses.output import OutputBuilder, new_id, usage_json
from toolserve.api.responses.store import ResponseStore, Stored
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import InvalidRequest, ToolserveError
from toolserve.serving.conversation import ChatRequest, Conversation, start_conversation
from toolserve.serving.pipeline import Finish
from toolserve.serving.registry import ModelRegistry
from toolserve.types import Message, Usage

router = APIRouter()
Json = dict[str, Any]


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
        self.id = new_id("resp")
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
            for ev in b.finish("incomplete"):
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

