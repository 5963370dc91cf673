"""The FastAPI app factory."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from toolserve import __version__
from toolserve.api import chat, completions, metrics, misc
from toolserve.api.errors import install_error_handlers
from toolserve.api.guard import Guard, GuardSettings
from toolserve.api.metrics import Metrics
from toolserve.serving.pipeline import Pipeline

LOCAL_ORIGINS = r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$"


def create_app(
    pipeline: Pipeline,
    guard: GuardSettings | None = None,
    cors_origins: Sequence[str] | None = None,
    *,
    log_prompts: bool = False,
) -> FastAPI:
    """Build the HTTP app around a loaded pipeline (no globals: tests pass their own)."""
    app = FastAPI(title="toolserve", version=__version__)
    app.state.pipeline = pipeline
    app.state.metrics = Metrics(pipeline)
    app.state.log_prompts = log_prompts  # off by default: logs never hold prompt text unless asked
    install_error_handlers(app)
    for module in (chat, completions, misc, metrics):
        app.include_router(module.router)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["*"], allow_headers=["*"]
        )
    else:  # default: pages served from this machine only
        app.add_middleware(
            CORSMiddleware, allow_origin_regex=LOCAL_ORIGINS, allow_methods=["*"], allow_headers=["*"]
        )
    app.add_middleware(Guard, settings=guard or GuardSettings(), on_response=app.state.metrics.count_request)
    return app
