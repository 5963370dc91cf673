"""POST /infill: code completion between a prefix and a suffix in llama-server's shape, as
llama.vim and llama.vscode send it (`input_prefix`, `input_suffix`, `input_extra` with other
files' names and texts, `prompt` typed at the cursor, `n_predict`, `stream` and the sampling
fields), on a model whose GGUF declares fill-in-the-middle tokens (serving/fim.py lays the
prompt out and trims it as llama-server does). The answer is llama-server's: `content`, `stop`,
token counts, `timings`; a stream is SSE `data:` lines without [DONE]."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, StrictBool, StrictInt, StrictStr

from toolserve.api.deps import RegistryDep, log_prompt
from toolserve.api.openai.schemas import _Model, _Request
from toolserve.api.streaming import sse_response, unless_disconnected
from toolserve.errors import Unsupported
from toolserve.serving.entries import LocalModel
from toolserve.serving.fim import Budget, ExtraChunk
from toolserve.serving.pipeline import Finish, Pipeline
from toolserve.serving.textgen import TextRequest, TextRun
from toolserve.types import SamplingParams, Usage

router = APIRouter()

# llama-server's sampling defaults, for the fields a request leaves out (the server's own first)
LLAMA_SERVER_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


class Extra(_Model):
    filename: StrictStr = "tmp"  # llama-server's default name
    text: StrictStr


class InfillRequest(_Request):
    model: StrictStr | None = None
    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: list[Extra] = Field(default_factory=list)
    prompt: StrictStr = ""  # typed at the cursor: follows the prefix
    n_predict: StrictInt = -1  # <= 0: until the context is full
    stream: StrictBool = False
    temperature: Annotated[float, Field(ge=0.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    seed: StrictInt | None = None  # negative: random (llama-server's -1)
    stop: list[StrictStr] | None = None
    repeat_penalty: Annotated[float, Field(gt=0.0, le=10.0)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    dry_multiplier: Annotated[float, Field(ge=0.0, le=10.0)] | None = None


def text_request(pipe: Pipeline, req: InfillRequest) -> tuple[TextRequest, bool]:
    """The prompt (trimmed to the context as llama-server trims it) and its sampling; whether
    the trimming cut anything."""
    max_tokens = req.n_predict if req.n_predict > 0 else None
    fim = pipe.fim_prompt(
        prefix=req.input_prefix, suffix=req.input_suffix, prompt=req.prompt,
        extra=[ExtraChunk(x.filename, x.text) for x in req.input_extra],
        budget=Budget.of(pipe.engine.info.n_ctx, max_tokens or 0), param="input_prefix", repository=True,
    )  # fmt: skip
    given = frozenset(k for k in (*LLAMA_SERVER_SAMPLING, "dry_multiplier") if getattr(req, k) is not None)
    values = {k: getattr(req, k) if k in given else v for k, v in LLAMA_SERVER_SAMPLING.items()}
    sampling = SamplingParams(
        max_tokens=0, temperature=float(values["temperature"]), top_k=int(values["top_k"]), top_p=float(values["top_p"]),
        min_p=float(values["min_p"]), repetition_penalty=req.repeat_penalty or 1.0, presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0, dry_multiplier=req.dry_multiplier or 0.0, seed=req.seed if req.seed is not None and req.seed >= 0 else None,
    )  # fmt: skip
    names = {"prompt": "input_prefix", "stop": "stop", "context_limit": "n_ctx"}
    return TextRequest(fim.tokens, sampling, given, max_tokens, tuple(req.stop or ()), names=names), fim.truncated


class InfillRun:
    """One infill's chunks (`stream`) or its whole answer (`complete`), in llama-server's words."""

    def __init__(self, run: TextRun, truncated: bool):
        self.run, self.truncated = run, truncated
        self.started = time.perf_counter()
        self.content: list[str] = []
        self.finish = Finish("stop", Usage(len(run.req.prompt), 0))
        self.id = f"infill-{uuid.uuid4().hex[:12]}"

    def _counts(self) -> dict[str, Any]:
        return {"tokens_predicted": self.finish.usage.completion_tokens, "tokens_evaluated": len(self.run.req.prompt)}

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        async for step in self.run.steps():
            if step.finish is not None:
                self.finish = step.finish
                continue
            text = "".join(d.text for d in step.deltas)  # type: ignore[union-attr]  # text_steps: content only
            self.content.append(text)
            yield {"index": 0, "content": text, "tokens": [], "stop": False, "id_slot": 0, **self._counts()}
        yield self.final("")

    def final(self, content: str) -> dict[str, Any]:
        f = self.finish
        stop_type = "limit" if f.finish_reason == "length" else "word" if f.stop_sequence is not None else "eos"
        prompt_ms, predicted_ms = (f.ttft or 0.0) * 1000, f.decode_time * 1000
        n_pred = f.usage.completion_tokens
        text = "".join(self.content)
        return {
            "index": 0, "content": content, "tokens": [], "id_slot": 0, "stop": True, "model": self.run.model_id,
            **self._counts(), "tokens_cached": f.usage.cached_tokens, "truncated": self.truncated, "stop_type": stop_type,
            "stopping_word": f.stop_sequence or "", "has_new_line": "\n" in text,
            "prompt": self.run.pipe.engine.detokenize(self.run.req.prompt).decode("utf-8", "replace"),
            "timings": {
                "cache_n": f.usage.cached_tokens, "prompt_n": f.usage.prompt_tokens - f.usage.cached_tokens,
                "prompt_ms": prompt_ms, "predicted_n": n_pred, "predicted_ms": predicted_ms,
                "predicted_per_second": n_pred / (predicted_ms / 1000) if predicted_ms > 0 else 0.0,
            },
        }  # fmt: skip

    async def complete(self) -> dict[str, Any]:
        async for _ in self.stream():
            pass
        return self.final("".join(self.content))


@router.post("/infill")
async def infill(req: InfillRequest, request: Request, registry: RegistryDep) -> Response:
    entry = registry.resolve(req.model)
    if not isinstance(entry, LocalModel):
        raise Unsupported(f"/infill needs a local model; '{entry.model_id}' runs on an upstream server.", param="model")
    pipe = await registry.pipeline(entry)
    truncated: list[bool] = []

    def build() -> TextRequest:
        text, cut = text_request(pipe, req)
        truncated.append(cut)
        return text

    run = await TextRun.start(pipe, build)
    log_prompt(request, f"{req.input_prefix}<FIM suffix>{req.input_suffix}")
    answer = InfillRun(run, truncated[0])
    if req.stream:
        return sse_response(answer.stream(), on_close=run.ticket.release, done=False)
    try:
        return JSONResponse(await unless_disconnected(request, answer.complete()))
    finally:
        run.ticket.release()
