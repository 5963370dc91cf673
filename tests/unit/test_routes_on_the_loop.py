"""Every route runs on the event loop: FastAPI runs a plain-function endpoint or dependency in
its thread pool, a hop to a worker thread and back on every request (0.5 ms of a passthrough
request's 2.2 ms against an upstream that answers at once, before the registry dependency was
made async)."""

from __future__ import annotations

import inspect
from typing import Annotated

import pytest
from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, APIRouter

from toolserve.api import metrics, misc
from toolserve.api.anthropic import routes as anthropic
from toolserve.api.llamacpp import infill, rerank, tokenize
from toolserve.api.ollama import embed as ollama_embed
from toolserve.api.ollama import models as ollama_models
from toolserve.api.ollama import routes as ollama
from toolserve.api.openai import chat, completions, embeddings
from toolserve.api.responses import mcp as responses_mcp
from toolserve.api.responses import routes as responses
from toolserve.api.web import web_router

MODULES = (chat, completions, responses, responses_mcp, anthropic, embeddings, rerank, infill, tokenize, ollama,
           ollama_embed, ollama_models, misc, metrics)


def routers() -> list[APIRouter]:
    return [m.router for m in MODULES] + [web_router(), misc.fault_router]


def routes() -> list[APIRoute]:
    return [r for router in routers() for r in router.routes if isinstance(r, APIRoute)]


def sync_calls(dep: Dependant) -> list[str]:
    """The plain (not async) functions among a dependant's own call and its dependencies."""
    found = []
    if dep.call is not None and not inspect.iscoroutinefunction(dep.call) and not inspect.isasyncgenfunction(dep.call):
        found.append(getattr(dep.call, "__qualname__", repr(dep.call)))
    for sub in dep.dependencies:
        found += sync_calls(sub)
    return found


def test_the_app_has_routes_to_check() -> None:
    paths = {r.path for r in routes()}
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat", "/health"} <= paths


@pytest.mark.parametrize("route", routes(), ids=lambda r: f"{','.join(sorted(r.methods))} {r.path}")
def test_no_endpoint_or_dependency_goes_to_the_thread_pool(route: APIRoute) -> None:
    assert sync_calls(route.dependant) == [], f"{route.path}: plain functions FastAPI would run in its thread pool"


def _plain(request: Request) -> int:
    return 1


def test_the_check_finds_a_plain_dependency() -> None:
    router = APIRouter()

    @router.get("/x")
    async def x(v: Annotated[int, Depends(_plain)]) -> int:
        return v

    @router.get("/y")
    def y() -> int:
        return 1

    found = {r.path: sync_calls(r.dependant) for r in router.routes if isinstance(r, APIRoute)}
    assert found == {"/x": ["_plain"], "/y": [y.__qualname__]}
