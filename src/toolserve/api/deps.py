"""FastAPI dependencies, declared once."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, Request

from toolserve.serving.registry import ModelRegistry


async def _registry(request: Request) -> ModelRegistry:
    """Async, so that FastAPI calls it on the event loop: a plain function dependency is run in
    its thread pool, a hop to a worker thread and back on every request."""
    return request.app.state.registry  # type: ignore[no-any-return]


RegistryDep = Annotated[ModelRegistry, Depends(_registry)]


prompt_log = logging.getLogger("toolserve.prompts")


def log_prompt(request: Request, text: str) -> None:
    """Log a rendered prompt, only when the server runs with --log-prompts (prompts are private)."""
    if getattr(request.app.state, "log_prompts", False):
        prompt_log.info("%s prompt %r", getattr(request.state, "request_id", "-"), text)
