"""GET /v1/models, GET /health, POST /tokenize, POST /detokenize."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from toolserve.api import convert
from toolserve.api.deps import PipelineDep
from toolserve.api.schemas import DetokenizeRequest, TokenizeRequest
from toolserve.errors import InvalidRequest

router = APIRouter()


def model_card(pipe: Any) -> dict[str, Any]:
    info = pipe.engine.info
    return {
        "id": pipe.model_id,
        "object": "model",
        "created": pipe.created,
        "owned_by": "toolserve",
        "max_model_len": info.n_ctx,
        "toolserve": {
            "path": info.path,
            "architecture": info.architecture,
            "n_ctx": info.n_ctx,
            "n_ctx_train": info.n_ctx_train,
            "n_vocab": info.n_vocab,
            "chat_template": pipe.template.label,
            "template_renders_tools": pipe.template.supports_tools,
            "tool_format": pipe.fmt.FORMAT_ID,
        },
    }


@router.get("/v1/models")
async def list_models(pipe: PipelineDep) -> dict[str, Any]:
    return {"object": "list", "data": [model_card(pipe)]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, pipe: PipelineDep) -> dict[str, Any]:
    pipe.check_model(model_id)
    return model_card(pipe)


@router.get("/health")
async def health(pipe: PipelineDep) -> dict[str, Any]:
    stats = pipe.engine.stats
    return {
        "status": "ok",
        "model": pipe.model_id,
        "toolserve": {
            "busy": stats.busy,
            "active": stats.active,
            "slots": pipe.engine.slots,
            "requests": stats.requests,
            "prompt_tokens": stats.prompt_tokens,
            "cached_tokens": stats.cached_tokens,
            "generated_tokens": stats.generated_tokens,
            "prompt_cache": cache_stats(pipe.engine),
        },
    }


def cache_stats(engine: Any) -> dict[str, Any] | None:
    cache = getattr(engine, "cache", None)
    if cache is None:
        return None
    return {**dataclasses.asdict(cache.stats), "budget_bytes": cache.budget, "chunk_tokens": engine.prefill_chunk}


@router.post("/tokenize")
async def tokenize(req: TokenizeRequest, pipe: PipelineDep) -> dict[str, Any]:
    pipe.check_model(req.model)
    text = req.prompt if req.prompt is not None else req.content
    if req.messages is not None:
        messages = convert.to_messages(req.messages)
        text = pipe.render_chat(messages)
    if text is None:
        raise InvalidRequest("Give 'prompt' (or 'content', or 'messages') to tokenize.", param="prompt")
    tokens = pipe.tokenize_prompt(text) if req.add_special_tokens else pipe.engine.tokenize(text)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": pipe.engine.info.n_ctx}


@router.post("/detokenize")
async def detokenize(req: DetokenizeRequest, pipe: PipelineDep) -> dict[str, Any]:
    pipe.check_model(req.model)
    n_vocab = pipe.engine.info.n_vocab
    bad = next((t for t in req.tokens if t >= n_vocab), None)
    if bad is not None:
        raise InvalidRequest(f"token {bad} is outside the vocabulary (0..{n_vocab - 1}).", param="tokens")
    text = pipe.engine.detokenize(req.tokens).decode("utf-8", "replace")
    return {"prompt": text, "content": text}
