"""POST /api/embed and /api/embeddings: Ollama's embeddings, served by the models that answer
/v1/embeddings (an --embedding-model, or a model started with --embeddings), admitted and
batched as those requests are. Vectors are L2-normalised (on both routes); an input over the
model's limit is cut to it unless `truncate` is false, then a 400 (Ollama's rule)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request

from toolserve.api.deps import RegistryDep
from toolserve.api.ollama.models import embedding_name
from toolserve.api.ollama.schemas import EmbeddingsRequest, EmbedRequest
from toolserve.api.openai.embeddings import embedder_for
from toolserve.api.streaming import unless_disconnected
from toolserve.errors import InvalidRequest
from toolserve.serving.embeddings import admit, check_dimensions, embed, token_lists

router = APIRouter()
NS = 1_000_000_000


@router.post("/api/embed")
async def embed_route(req: EmbedRequest, request: Request, registry: RegistryDep) -> dict[str, Any]:
    started = time.perf_counter()
    texts = [req.input] if isinstance(req.input, str) else list(req.input)
    texts = [t for t in texts if t] if isinstance(req.input, str) else texts  # "" alone: nothing (Ollama's load call)
    name = req.model or ""
    async with embedder_for(request, registry, embedding_name(request, registry, req.model)) as (model_id, e):
        loaded = time.perf_counter()
        if not texts:
            return {"model": name or model_id, "embeddings": []}
        check_dimensions(e, req.dimensions)
        admit(e, registry.limits)
        try:
            tokens = await asyncio.to_thread(token_lists, e, texts, truncate=req.truncate)
        except InvalidRequest as exc:
            if exc.param is None and not req.truncate:  # over the limit: Ollama's words, and how to allow it
                raise InvalidRequest(f"the input length exceeds the context length ({e.n_ctx} tokens); send truncate: true to cut it") from None
            raise
        rows = await unless_disconnected(request, embed(e, tokens, registry.limits))
    return {
        "model": name or model_id,
        "embeddings": rows.tolist(),
        "total_duration": int((time.perf_counter() - started) * NS),
        "load_duration": int((loaded - started) * NS),
        "prompt_eval_count": sum(len(t) for t in tokens),
    }


@router.post("/api/embeddings")
async def embeddings_route(req: EmbeddingsRequest, request: Request, registry: RegistryDep) -> dict[str, Any]:
    """Ollama's older endpoint: one `prompt`, one `embedding` (none for an empty prompt)."""
    async with embedder_for(request, registry, embedding_name(request, registry, req.model)) as (_, e):
        if not req.prompt:
            return {"embedding": []}
        admit(e, registry.limits)
        tokens = await asyncio.to_thread(token_lists, e, [req.prompt], truncate=True)
        rows = await unless_disconnected(request, embed(e, tokens, registry.limits))
    return {"embedding": rows[0].tolist()}
