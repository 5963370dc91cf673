"""GET /v1/models, POST /v1/models/{id}/unload, GET /health (/tokenize and /detokenize: api/llamacpp/tokenize.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from toolserve.api.deps import RegistryDep
from toolserve.errors import Unsupported
from toolserve.models.files import BUNDLED_FILE
from toolserve.models.sampling import card as sampling_card
from toolserve.serving.embeddings import describe
from toolserve.serving.entries import Entry, LocalModel
from toolserve.serving.facts import Facts, read_facts
from toolserve.serving.pipeline import Pipeline
from toolserve.serving.registry import ModelRegistry

router = APIRouter()


def model_card(pipe: Any) -> dict[str, Any]:
    info = pipe.engine.info
    out: dict[str, Any] = {
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
            "vision": info.vision,
            "input_modalities": ["text", "image"] if info.vision else ["text"],
            "weight_repacking": info.repack,
            "adapters": [{"path": a.path, "scale": a.scale} for a in pipe.adapters],
            **({"base": pipe.base_id} if pipe.base_id else {}),
            "placement": placement(pipe),
            "sampling_defaults": sampling_card(pipe.sampling_defaults),
        },
    }
    embedder = getattr(pipe.engine, "embedder", None)
    if embedder is not None and not getattr(pipe, "adapters", ()):  # --embeddings: /v1/embeddings takes this model too
        out["toolserve"]["embeddings"] = describe(embedder)
    return out


def placement(pipe: Any) -> dict[str, Any] | None:
    """Where the model's layers are (engine.base.Placement), with its one-line summary."""
    where = getattr(pipe.engine.info, "placement", None)
    return None if where is None else {**dataclasses.asdict(where), "summary": where.summary()}


def card(entry: Entry, flags: dict[str, float] | None = None) -> dict[str, Any]:
    """A model of the registry as /v1/models lists it; `toolserve.loaded` says if it is in memory."""
    if not isinstance(entry, LocalModel):
        return entry.card()  # type: ignore[attr-defined, no-any-return]
    if entry.pipeline is not None:
        out = model_card(entry.pipeline)
    else:  # not loaded: what the configuration says
        cfg = entry.cfg
        out = {
            "id": entry.id,
            "object": "model",
            "created": entry.created,
            "owned_by": "toolserve",
            "max_model_len": cfg.ctx_size,
            "toolserve": {"path": cfg.model or BUNDLED_FILE, "n_ctx": cfg.ctx_size},
        }
        if entry.base is not None:
            spec = next(a.lora for a in cfg.lora_models if a.id == entry.id)
            out["toolserve"]["adapters"] = [{"path": spec.path, "scale": spec.scale}]
        else:
            out["toolserve"]["adapters"] = [{"path": a.path, "scale": a.scale} for a in cfg.lora]
    facts = model_facts(entry, flags or {})
    if facts is not None:  # the loaded engine's own defaults win (a card never disagrees with what a request gets)
        out["toolserve"] = {**facts.card(), **out["toolserve"]}
    out["toolserve"] = {"backend": "local", **out["toolserve"], **entry.status()}
    return out


def model_facts(entry: LocalModel, flags: dict[str, float]) -> Facts | None:
    """Reference, size, quantisation and sampling defaults of a local model (the server's
    sampling `flags` over the file's), read once."""
    if entry.facts is None:
        entry.facts = read_facts(entry.cfg, flags) or False
    return entry.facts or None


@router.get("/v1/models")
async def list_models(registry: RegistryDep, request: Request) -> dict[str, Any]:
    served = [card(e, registry.limits.sampling_defaults) for e in registry.entries if e.model_id is not None]
    embedding_only = [m.card() for m in getattr(request.app.state, "embedding_models", {}).values()]
    rerankers = [m.card() for m in getattr(request.app.state, "rerank_models", {}).values()]
    return {"object": "list", "data": served + embedding_only + rerankers}


@router.post("/v1/models/{model_id:path}/unload")
async def unload_model(model_id: str, registry: RegistryDep) -> dict[str, Any]:
    """Free a local model now (LocalAI's 'free'); 409 while it serves requests."""
    return card(await registry.unload(model_id), registry.limits.sampling_defaults)


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, registry: RegistryDep) -> dict[str, Any]:
    return card(registry.find(model_id), registry.limits.sampling_defaults)


def engine_stats(pipe: Pipeline) -> dict[str, Any]:
    stats = pipe.engine.stats
    return {
        "busy": stats.busy,
        "active": stats.active,
        "slots": pipe.engine.slots,
        "requests": stats.requests,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "generated_tokens": stats.generated_tokens,
        "shared_decodes": stats.shared_decodes,
        "speculative": {"drafted_tokens": stats.drafted_tokens, "accepted_tokens": stats.accepted_tokens},
        "prompt_cache": cache_stats(pipe.engine),
        "placement": placement(pipe),
        "engine": pipe.engine.health() if hasattr(pipe.engine, "health") else {"process": "server"},
    }


def _failed(entry: Entry) -> bool:
    return isinstance(entry, LocalModel) and entry.status()["state"] == "failed"


@router.get("/health", response_model=None)
async def health(registry: RegistryDep) -> dict[str, Any] | JSONResponse:
    only = registry.entries[0]
    if len(registry.entries) == 1 and isinstance(only, LocalModel) and only.pipeline is not None:
        one = {"status": "ok", "model": only.id, "toolserve": engine_stats(only.pipeline)}  # one local model
        if _failed(only):  # its engine process failed for good: a load balancer should look elsewhere
            return JSONResponse({**one, "status": "unavailable"}, 503)
        return one
    models: dict[str, Any] = {}
    for e in registry.entries:
        if isinstance(e, LocalModel):
            models[e.id] = {"backend": "local", **e.status()}
            if e.pipeline is not None:
                models[e.id].update(engine_stats(e.pipeline))
        else:
            models[e.model_id or "?"] = e.status()
    down = [e for e in registry.upstream if not e.status()["available"]]
    failed = [m for m in registry.local if _failed(m)]
    body = {
        "status": "ok" if not down and not failed else "degraded",
        "model": registry.default_entry().model_id,
        "models": models,
    }
    if len(failed) < len(registry.local) or len(down) < len(registry.upstream):
        return body
    body["status"] = "unavailable"  # no model can answer: a load balancer should look elsewhere
    return JSONResponse(body, 503)


async def local_pipeline(registry: ModelRegistry, name: str | None, what: str) -> Pipeline:
    entry = registry.resolve(name)
    if not isinstance(entry, LocalModel):
        raise Unsupported(f"{what} is not available for '{entry.model_id}': an upstream server runs it.", param="model")
    return await registry.pipeline(entry)


def cache_stats(engine: Any) -> dict[str, Any] | None:
    cache = getattr(engine, "cache", None)
    if cache is None:
        return None
    return {**dataclasses.asdict(cache.stats), "budget_bytes": cache.budget, "chunk_tokens": engine.prefill_chunk}


# -- test-only: make an engine process fault on demand (TOOLSERVE_TEST_FAULTS=1; see engine/worker.py)
fault_router = APIRouter()


class FaultRequest(BaseModel):
    model: str | None = None
    kind: Literal["segv", "abort", "exit", "hang", "kill"]


@fault_router.post("/debug/engine-fault")
async def engine_fault(body: FaultRequest, registry: RegistryDep) -> dict[str, Any]:
    pipe = await local_pipeline(registry, body.model, "/debug/engine-fault")
    engine = pipe.engine
    if not hasattr(engine, "fault"):
        raise Unsupported("This model's engine runs in the server's own process (--no-engine-process).", param="model")
    engine.fault(body.kind)
    return {"armed": body.kind, "pid": getattr(engine, "pid", None)}
