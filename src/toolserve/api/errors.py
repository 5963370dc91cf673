"""The one place where exceptions become OpenAI error responses."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from toolserve.api.schemas import SURROGATE_ERROR
from toolserve.errors import ToolserveError

log = logging.getLogger(__name__)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_of(exc: ToolserveError) -> dict[str, Any]:
    return error_body(exc.message, exc.type, exc.param, exc.code)


_FIELD = re.compile(r"^[a-z_][a-z0-9_]*$")
_TYPE_LABELS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _param(loc: tuple[Any, ...]) -> str | None:
    """('body', 'messages', 0, 'role') -> 'messages[0].role' (OpenAI's spelling)."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TYPE_LABELS or not _FIELD.match(str(part)):
            continue  # pydantic's union-branch labels ('str', 'list[str]', 'TextPart') say nothing to the client
        else:
            out += f".{part}" if out else str(part)
    return out or None


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx")
        detail = ctx.get("error", first["msg"]) if isinstance(ctx, dict) else first["msg"]
        msg = f"The request body is not valid JSON: {detail}"
        return JSONResponse(error_body(msg, "invalid_request_error", None, "invalid_json"), 400)
    if first.get("type") == SURROGATE_ERROR:
        ctx = first.get("ctx")
        where = ctx.get("param") if isinstance(ctx, dict) else None
        return JSONResponse(error_body(str(first["msg"]), "invalid_request_error", where, "invalid_unicode"), 400)
    loc = tuple(first.get("loc", ()))
    param = _param(loc)
    if first.get("type") == "missing":
        msg = f"Missing required parameter: '{param}'."
        code = "missing_required_parameter"
    else:
        msg = f"Invalid value for '{param}': {first['msg']}." if param else f"Invalid request: {first['msg']}."
        code = "invalid_value"
    return JSONResponse(error_body(msg, "invalid_request_error", param, code), 400)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ToolserveError)
    async def _ours(_: Request, exc: ToolserveError) -> JSONResponse:
        if exc.status >= 500:
            log.error("%s: %s", type(exc).__name__, exc.message)
        return JSONResponse(error_of(exc), exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse(error_body(str(exc.detail), kind, None, code), exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", "server_error"), 500)
