"""FastAPI dependencies, declared once."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from toolserve.serving.pipeline import Pipeline


def _pipeline(request: Request) -> Pipeline:
    return request.app.state.pipeline  # type: ignore[no-any-return]


PipelineDep = Annotated[Pipeline, Depends(_pipeline)]
