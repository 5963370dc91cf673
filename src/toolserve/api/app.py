"""The FastAPI app factory."""

from __future__ import annotations

from fastapi import FastAPI

from toolserve import __version__
from toolserve.api import chat, completions, misc
from toolserve.api.errors import install_error_handlers
from toolserve.serving.pipeline import Pipeline


def create_app(pipeline: Pipeline) -> FastAPI:
    """Build the HTTP app around a loaded pipeline (no globals: tests pass their own)."""
    app = FastAPI(title="toolserve", version=__version__)
    app.state.pipeline = pipeline
    install_error_handlers(app)
    for module in (chat, completions, misc):
        app.include_router(module.router)
    return app
