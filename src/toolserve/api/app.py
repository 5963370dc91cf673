"""The FastAPI app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from toolserve import __version__
from toolserve.api import metrics, misc
from toolserve.api.anthropic import routes as anthropic
from toolserve.api.errors import install_error_handlers
from toolserve.api.guard import LOCAL_ORIGINS, Guard, GuardSettings
from toolserve.api.llamacpp import infill, rerank, tokenize
from toolserve.api.metrics import Metrics
from toolserve.api.ollama import embed as ollama_embed
from toolserve.api.ollama import models as ollama_models
from toolserve.api.ollama import routes as ollama
from toolserve.api.openai import chat, completions, embeddings
from toolserve.api.responses import mcp as responses_mcp
from toolserve.api.responses import routes as responses
from toolserve.api.responses.store import ResponseStore
from toolserve.api.web import web_router
from toolserve.mcp.client import McpClients, McpPolicy
from toolserve.serving.embeddings import EmbeddingModel
from toolserve.serving.pipeline import Pipeline
from toolserve.serving.registry import ModelRegistry
from toolserve.serving.rerank import RerankModel


def create_app(
    models: Pipeline | ModelRegistry,
    guard: GuardSettings | None = None,
    cors_origins: Sequence[str] | None = None,
    *,
    log_prompts: bool = False,
    web: bool = True,
    embedding_models: Sequence[EmbeddingModel] = (),
    rerank_models: Sequence[RerankModel] = (),
    test_faults: bool = False,
    mcp: McpClients | None = None,
) -> FastAPI:
    """Build the HTTP app around a loaded pipeline, or a registry of models (no globals: tests
    pass their own). The registry's background work (upstream health, idle unloading) runs
    for the app's lifetime. `web`: the chat page at / (api/web.py). `embedding_models`: models
    served for /v1/embeddings only (--embedding-model); `rerank_models`, for /v1/rerank only
    (--rerank-model). `test_faults`: the test-only
    POST /debug/engine-fault (the environment's TOOLSERVE_TEST_FAULTS=1). `mcp`: the MCP
    servers of --mcp-config and the policy for those a request names (by default none, and
    no URL allowed)."""
    registry = models if isinstance(models, ModelRegistry) else ModelRegistry.single(models)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await registry.start()
        try:
            yield
        finally:
            await app.state.mcp.close()  # stops the stdio servers
            await registry.stop()

    app = FastAPI(title="toolserve", version=__version__, lifespan=lifespan)
    app.state.registry = registry
    app.state.metrics = Metrics(registry)
    app.state.responses = ResponseStore()
    app.state.embedding_models = {m.id: m for m in embedding_models}
    app.state.rerank_models = {m.id: m for m in rerank_models}
    app.state.mcp = mcp if mcp is not None else McpClients({}, McpPolicy())
    app.state.log_prompts = log_prompts  # off by default: logs never hold prompt text unless asked
    install_error_handlers(app)
    for module in (chat, completions, responses, responses_mcp, anthropic, embeddings, rerank, infill, tokenize, ollama, ollama_embed, ollama_models, misc, metrics):
        app.include_router(module.router)
    if web:
        app.include_router(web_router())
    if test_faults:
        app.include_router(misc.fault_router)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["*"], allow_headers=["*"]
        )
    else:  # default: pages served from this machine only
        app.add_middleware(
            CORSMiddleware, allow_origin_regex=LOCAL_ORIGINS, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(ollama.JsonBodies)
    app.add_middleware(Guard, settings=guard or GuardSettings(), on_response=app.state.metrics.count_request)
    return app
