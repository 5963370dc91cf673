"""POST /v1/rerank (also /rerank and /v2/rerank) in the Jina / Cohere shape: `query`,
`documents` (strings or objects with `text`), `top_n`, `return_documents`; `results` sorted by
`relevance_score`, each with its document's `index`; `usage`. Served by the models started
with --rerank-model; admitted and batched as embeddings are (serving/embeddings.py)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field, StrictBool, StrictStr

from toolserve.api.deps import RegistryDep
from toolserve.api.openai.schemas import _Model, _Request
from toolserve.api.streaming import unless_disconnected
from toolserve.errors import InvalidRequest, ModelNotFound, ToolserveError
from toolserve.serving.embeddings import admit, embed
from toolserve.serving.registry import ModelRegistry
from toolserve.serving.rerank import RerankModel, pairs, relevance

router = APIRouter()

HOW = "start the server with --rerank-model PATH (a reranker GGUF: bge-reranker, Qwen3-Reranker, jina-reranker) and ask for its id"


class Document(_Model):
    text: StrictStr


class RerankRequest(_Request):
    model: StrictStr | None = None
    query: StrictStr
    documents: Annotated[list[StrictStr | Document], Field(min_length=1)]
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: StrictBool = True  # Jina's default; Cohere's clients read `index` and ignore the rest


def rerank_models(request: Request) -> dict[str, RerankModel]:
    return getattr(request.app.state, "rerank_models", {})  # type: ignore[no-any-return]


def reranker(request: Request, registry: ModelRegistry, name: str | None) -> RerankModel:
    """The reranker a request names (none: the first); a chat or embedding model is a 400 that
    says how to start a reranker, an unknown name a 404."""
    own = rerank_models(request)
    bare = name[: -len(":latest")] if name and name.endswith(":latest") else name
    if not name:
        if own:
            return next(iter(own.values()))
        raise InvalidRequest(f"This server has no reranker: {HOW}.", param="model")
    if name in own or bare in own:
        return own[name] if name in own else own[str(bare)]
    if name in getattr(request.app.state, "embedding_models", {}) or _served(registry, name):
        served = f" (this server reranks with {', '.join(repr(i) for i in own)})" if own else ""
        raise InvalidRequest(f"The model '{name}' is not a reranker{served}; to rerank, {HOW}.", param="model")
    known = ", ".join(f"'{i}'" for i in own) or "none"
    raise ModelNotFound(f"The model '{name}' does not exist; this server's rerankers: {known}. To add one, {HOW}.", param="model")


def _served(registry: ModelRegistry, name: str) -> bool:
    """Whether a chat model answers `name` (its id, or a --model-map pattern)."""
    try:
        registry.resolve(name)
    except ToolserveError:
        return False
    return True


@router.post("/v1/rerank")
@router.post("/v2/rerank")
@router.post("/rerank")
async def rerank(req: RerankRequest, request: Request, registry: RegistryDep) -> dict[str, Any]:
    m = reranker(request, registry, req.model)
    e = m.embedder
    texts = [d if isinstance(d, str) else d.text for d in req.documents]
    admit(e, registry.limits)
    tokens = await asyncio.to_thread(pairs, e, req.query, texts)  # many long documents take a while: not on the event loop
    rows = await unless_disconnected(request, embed(e, tokens, registry.limits, normalise=False))
    scores = [relevance(e.architecture, row) for row in rows]
    order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[: req.top_n]
    results = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if req.return_documents:
            item["document"] = {"text": texts[i]}
        results.append(item)
    n = sum(len(t) for t in tokens)
    return {"model": req.model or m.id, "object": "list", "results": results, "usage": {"prompt_tokens": n, "total_tokens": n}}
