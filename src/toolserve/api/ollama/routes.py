"""POST /api/chat and /api/generate: Ollama's API as an adapter of the conversation core (Open
WebUI, Continue, Home Assistant, VS Code's Ollama provider talk to a local model).

One `Reply` builder turns a conversation's deltas into Ollama's stream chunks and its whole
message, so a stream folds to exactly the non-streamed answer. Tool calls go out whole (Ollama's
arguments are objects, not JSON text): a call is sent once the model has finished it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.errors import error_of
from toolserve.api.ollama import convert
from toolserve.api.ollama import schemas as oll
from toolserve.api.ollama.models import ResolveName, can_think, created_at, load_for, resolve, unload_for
from toolserve.api.streaming import ndjson_response, unless_disconnected
from toolserve.errors import InvalidRequest, ToolserveError, Unsupported
from toolserve.serving.conversation import Step, start_conversation
from toolserve.serving.entries import LocalModel
from toolserve.serving.pipeline import Finish
from toolserve.serving.registry import ModelRegistry
from toolserve.serving.textgen import TextRequest, TextRun
from toolserve.types import Delta, ReasoningDelta, ToolCallArgs, ToolCallStart, Usage

router = APIRouter()
NS = 1_000_000_000


class JsonBodies:
    """Ollama reads every /api/* body as JSON, whatever its Content-Type (its own docs send
    `curl -d '{...}'`, which says form data): such a request is given JSON's content type."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/api/"):
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-type"]
            kinds = [v for k, v in scope.get("headers", []) if k.lower() == b"content-type"]
            if not kinds or b"json" not in kinds[0].lower():
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


class Reply:
    """An answer's message: `add` returns the message pieces one delta causes (text at once, a
    call when it is complete), `message` the whole of them."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self._call: dict[str, Any] | None = None  # the call being written: its start and JSON text so far

    def add(self, d: Delta) -> list[dict[str, Any]]:
        if isinstance(d, ToolCallArgs):
            assert self._call is not None  # the parsers send a call's arguments right after its start
            self._call["json"] += d.fragment
            return []
        out = self.flush()
        if isinstance(d, ToolCallStart):
            self._call = {"id": d.id, "name": d.name, "json": ""}
        elif d.text:
            key = "thinking" if isinstance(d, ReasoningDelta) else "content"
            (self.thinking if key == "thinking" else self.content).append(d.text)
            out.append({"role": "assistant", "content": "", key: d.text} if key == "thinking" else {"role": "assistant", "content": d.text})
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The call being written, now complete, as a message piece (none if none)."""
        if self._call is None:
            return []
        call, self._call = self._call, None
        try:  # the parsers close a call cut by max_tokens into valid JSON; anything else reads as {}
            args = json.loads(call["json"]) if call["json"] else {}
        except json.JSONDecodeError:
            args = {}
        done = {"id": call["id"], "function": {"index": len(self.calls), "name": call["name"], "arguments": args if isinstance(args, dict) else {}}}
        self.calls.append(done)
        return [{"role": "assistant", "content": "", "tool_calls": [done]}]

    def message(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.thinking:
            out["thinking"] = "".join(self.thinking)
        if self.calls:
            out["tool_calls"] = self.calls
        return out


def metrics(finish: Finish, started: float, load_s: float) -> dict[str, Any]:
    """The final chunk's counters and durations, in nanoseconds as Ollama gives them."""
    return {
        "done_reason": "length" if finish.finish_reason == "length" else "stop",
        "total_duration": int((time.perf_counter() - started) * NS),
        "load_duration": int(load_s * NS),
        "prompt_eval_count": finish.usage.prompt_tokens,
        "prompt_eval_duration": int((finish.ttft or 0.0) * NS),
        "eval_count": finish.usage.completion_tokens,
        "eval_duration": int(finish.decode_time * NS),
    }


class OllamaRun:
    """One answer's Steps as Ollama's chunks (`stream`) or one whole response (`complete`):
    /api/chat's `message`, or /api/generate's `response` and `thinking`."""

    def __init__(self, steps: AsyncIterator[Step], name: str, started: float, load_s: float, *, chat: bool):
        self.steps, self.name, self.started, self.load_s, self.chat = steps, name, started, load_s, chat
        self.reply = Reply()
        self.finish = Finish("stop", Usage(0, 0))

    def _body(self, piece: dict[str, Any], done: bool) -> dict[str, Any]:
        head: dict[str, Any] = {"model": self.name, "created_at": created_at()}
        if self.chat:
            return {**head, "message": piece, "done": done}
        text = {"response": piece.get("content", "")}
        if piece.get("thinking"):
            text["thinking"] = piece["thinking"]
        return {**head, **text, "done": done}

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        async for step in self.steps:
            for d in step.deltas:
                for piece in self.reply.add(d):
                    yield self._body(piece, False)
            if step.finish is not None:
                self.finish = step.finish
        for piece in self.reply.flush():
            yield self._body(piece, False)
        yield {**self._body({"role": "assistant", "content": ""}, True), **metrics(self.finish, self.started, self.load_s)}

    async def complete(self) -> dict[str, Any]:
        """The whole answer: the stream's pieces, folded by the same builder."""
        async for _ in self.stream():
            pass
        return {**self._body(self.reply.message(), True), **metrics(self.finish, self.started, self.load_s)}


def stream_error(exc: ToolserveError) -> dict[str, Any]:
    """A failure after the stream began: one more line, Ollama's `{"error": "..."}`."""
    return {"error": error_of(exc)["error"]["message"]}


def check_think(entry: Any, think: bool | str | None, name: str) -> None:
    """`think` on a model that does not think (`can_think`): Ollama's 400."""
    if think is None or think is False:
        return
    model = entry.pipeline if isinstance(entry, LocalModel) else entry
    if can_think(model) is False:
        raise InvalidRequest(f'"{name}" does not support thinking', param="think")


async def answer(request: Request, run: OllamaRun, stream: bool, release: Callable[[], None]) -> Response:
    if stream:
        return ndjson_response(run.stream(), on_close=release, error=stream_error)
    try:
        return JSONResponse(await unless_disconnected(request, run.complete()))
    finally:
        release()


@router.post("/api/chat")
async def chat(req: oll.ChatRequest, request: Request, registry: RegistryDep) -> Response:
    started = time.perf_counter()
    found = resolve(registry, req.model)
    keep = convert.keep_alive_seconds(req.keep_alive)
    if not req.messages:  # no messages: load the model, or with keep_alive 0 unload it (Ollama's)
        reason = await load_or_unload(registry, found, keep)
        return JSONResponse({"model": found.name, "created_at": created_at(), "message": {"role": "assistant", "content": ""},
                             "done_reason": reason, "done": True})
    load_s = await load_for(registry, found, keep)
    check_think(found.entry, req.think, found.name)
    conv = await start_conversation(registry, convert.chat_request(req, found.entry.model_id))
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    run = OllamaRun(conv.choice(0), found.name, started, load_s, chat=True)
    return await answer(request, run, req.stream, conv.ticket.release)


@router.post("/api/generate")
async def generate(req: oll.GenerateRequest, request: Request, registry: RegistryDep) -> Response:
    started = time.perf_counter()
    found = resolve(registry, req.model)
    keep = convert.keep_alive_seconds(req.keep_alive)
    check_generate(req)
    if not req.prompt and not req.suffix:  # no prompt: load the model, or with keep_alive 0 unload it
        reason = await load_or_unload(registry, found, keep)
        return JSONResponse({"model": found.name, "created_at": created_at(), "response": "", "done": True, "done_reason": reason})
    load_s = await load_for(registry, found, keep)
    if req.raw or req.suffix:
        text = await start_text(registry, found, req)
        for_log = f"{req.prompt}<FIM suffix>{req.suffix}" if req.suffix else req.prompt
        log_prompt(request, for_log)
        return await answer(request, OllamaRun(text.steps(), found.name, started, load_s, chat=False), req.stream, text.ticket.release)
    check_think(found.entry, req.think, found.name)
    conv = await start_conversation(registry, convert.generate_request(req, found.entry.model_id))
    if conv.prompt_text is not None:
        log_prompt(request, conv.prompt_text)
    run = OllamaRun(conv.choice(0), found.name, started, load_s, chat=False)
    return await answer(request, run, req.stream, conv.ticket.release)


async def load_or_unload(registry: ModelRegistry, found: ResolveName, keep: float | None) -> str:
    """A request with nothing to answer: Ollama's way to load a model, or (keep_alive 0) unload it."""
    if keep == 0:
        await unload_for(registry, found)
        return "unload"
    await load_for(registry, found, keep)
    return "load"


def check_generate(req: oll.GenerateRequest) -> None:
    """What /api/generate's fields cannot do together, refused before any work."""
    if req.context:
        raise Unsupported(
            "context (Ollama's deprecated token memory) is not supported: send the conversation to /api/chat as messages.",
            param="context",
        )
    if req.template:
        raise Unsupported(
            "template is not supported: toolserve renders prompts with the model's own (Jinja) chat template; "
            "send raw: true with a prompt you rendered yourself.",
            param="template",
        )
    if req.raw and req.system:
        raise InvalidRequest("raw mode does not support system: the prompt is taken as it is.", param="raw")
    # raw with a suffix is fill-in-the-middle: its prompt is no chat template either (Ollama would
    # drop the suffix; a client sending both wants the completion between prompt and suffix)
    if (req.raw or req.suffix) and req.images:
        raise Unsupported("images need a templated prompt: leave out raw and suffix, or send them to /api/chat.", param="images")


async def start_text(registry: ModelRegistry, found: ResolveName, req: oll.GenerateRequest) -> TextRun:
    """A raw prompt, or a fill-in-the-middle one (`suffix`), on a local model."""
    if not isinstance(found.entry, LocalModel):
        what = "suffix (fill-in-the-middle)" if req.suffix else "raw"
        raise Unsupported(f"{what} needs a local model; '{found.entry.model_id}' runs on an upstream server.", param="model")
    pipe = await registry.pipeline(found.entry)

    def build() -> TextRequest:
        if req.suffix:
            tokens = pipe.fim_prompt(prefix=req.prompt, suffix=req.suffix, param="suffix").tokens
        else:
            tokens = pipe.tokenize_prompt(req.prompt)
        params, stops, max_tokens, given = convert.sampling(req.options)
        return TextRequest(
            tokens, params, given, max_tokens, stops, convert.response_schema(req.format), convert.context_limit(req.options),
            names={"prompt": "prompt", "stop": "options.stop", "context_limit": "options.num_ctx"},
        )

    return await TextRun.start(pipe, build)
