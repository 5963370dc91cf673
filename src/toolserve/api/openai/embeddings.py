"""POST /v1/embeddings (OpenAI's shape): an embedding model, or a generation model started with --embeddings."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from toolserve.api.deps import RegistryDep
from toolserve.api.openai.schemas import EmbeddingRequest
from toolserve.api.streaming import unless_disconnected
from toolserve.engine.embed import Embedder
from toolserve.errors import ModelNotFound, Unsupported
from toolserve.serving.embeddings import EmbeddingModel, admit, check_dimensions, embed, token_lists
from toolserve.serving.entries import LocalModel
from toolserve.serving.pipeline import Limits
from toolserve.serving.registry import ModelRegistry

router = APIRouter()


def embedding_models(request: Request) -> dict[str, EmbeddingModel]:
    return getattr(request.app.state, "embedding_models", {})  # type: ignore[no-any-return]


def embedder_of(pipe: Any) -> Embedder | None:
    """The embedder a generation engine carries (`--embeddings`), if any."""
    return getattr(pipe.engine, "embedder", None)


@router.post("/v1/embeddings")
async def embeddings(req: EmbeddingRequest, request: Request, registry: RegistryDep) -> dict[str, Any]:
    async with embedder_for(request, registry, req.model) as (model_id, e):
        return await _answer(req, request, model_id, e, registry.limits)


@contextlib.asynccontextmanager
async def embedder_for(request: Request, registry: ModelRegistry, name: str | None) -> AsyncIterator[tuple[str, Embedder]]:
    """The model that embeds for `name` (an --embedding-model, or a model started with
    --embeddings, held so it is not unloaded meanwhile): its id and its embedder."""
    own = embedding_models(request)
    if name in own or (not name and own and not _default_embeds(registry)):
        m = own[name] if name else next(iter(own.values()))
        yield m.id, m.embedder
        return
    entry = _resolve(registry, name, own)
    if not isinstance(entry, LocalModel):
        raise Unsupported(f"The model '{entry.model_id}' cannot embed here: an upstream server runs it.", param="model")
    async with registry.hold(entry) as pipe:  # not unloaded while it embeds
        if getattr(pipe, "adapters", ()):
            # the embedding context computes on the base weights: vectors without the adapters
            # would be answered under the adapter's id
            raise Unsupported(
                f"The model '{entry.id}' runs with LoRA adapters, which embeddings do not apply; "
                "ask for an id without adapters (a --lora-model's base), or serve an embedding model with --embedding-model PATH.",
                param="model",
            )
        e = embedder_of(pipe)
        if e is None:
            hint = f" This server embeds with {', '.join(repr(i) for i in own)}." if own else ""
            raise Unsupported(
                f"The model '{entry.id}' was not started for embeddings: start it with --embeddings (models.yaml: "
                f"embeddings: true), or serve an embedding model beside it with --embedding-model PATH.{hint}",
                param="model",
            )
        yield entry.id, e


def _default_embeds(registry: ModelRegistry) -> bool:
    entry = registry.default_entry()
    if not isinstance(entry, LocalModel):
        return False
    return entry.cfg.embeddings if entry.pipeline is None else embedder_of(entry.pipeline) is not None  # not loaded yet: as configured


def _resolve(registry: ModelRegistry, name: str | None, own: dict[str, EmbeddingModel]) -> Any:
    try:
        return registry.resolve(name)
    except ModelNotFound:
        if not own:
            raise
        known = ", ".join(f"'{i}'" for i in [*own, *registry.ids()])
        raise ModelNotFound(f"The model '{name}' does not exist; this server serves {known}.", param="model") from None


async def _answer(req: EmbeddingRequest, request: Request, model_id: str, e: Embedder, limits: Limits) -> dict[str, Any]:
    check_dimensions(e, req.dimensions)
    admit(e, limits)
    tokens = await asyncio.to_thread(token_lists, e, req.input)  # 2048 long texts take a while: not on the event loop
    rows = await unless_disconnected(request, embed(e, tokens, limits))  # a client that leaves stops its work
    data = []
    for i, row in enumerate(rows):
        vector: Any = (
            base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") if req.encoding_format == "base64" else row.tolist()
        )
        data.append({"object": "embedding", "index": i, "embedding": vector})
    n = sum(len(t) for t in tokens)
    return {"object": "list", "data": data, "model": model_id, "usage": {"prompt_tokens": n, "total_tokens": n}}
