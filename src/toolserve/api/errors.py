"""The one place where exceptions become error responses: OpenAI's shape, or Anthropic's on
the Messages API's routes."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from toolserve.api.schemas import SURROGATE_ERROR
from toolserve.errors import ClientGone, ToolserveError

log = logging.getLogger(__name__)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_of(exc: ToolserveError) -> dict[str, Any]:
    return error_body(exc.message, exc.type, exc.param, exc.code)


# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error",
}


def is_anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = _ANTHROPIC_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def shaped(path: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI error body in the shape of the protocol that `path` belongs to."""
    return anthropic_error(status, body["error"]["message"]) if is_anthropic(path) else body


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


def _validation_response(exc: RequestValidationError) -> tuple[dict[str, Any], int]:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx")
        detail = ctx.get("error", first["msg"]) if isinstance(ctx, dict) else first["msg"]
        msg = f"The request body is not valid JSON: {detail}"
        return error_body(msg, "invalid_request_error", None, "invalid_json"), 400
    if first.get("type") == SURROGATE_ERROR:
        ctx = first.get("ctx")
        where = ctx.get("param") if isinstance(ctx, dict) else None
        return error_body(str(first["msg"]), "invalid_request_error", where, "invalid_unicode"), 400
    loc = tuple(first.get("loc", ()))
    param = _param(loc)
    if first.get("type") == "missing":
        msg = f"Missing required parameter: '{param}'."
        code = "missing_required_parameter"
    else:
        msg = f"Invalid value for '{param}': {first['msg']}." if param else f"Invalid request: {first['msg']}."
        code = "invalid_value"
    return error_body(msg, "invalid_request_error", param, code), 400


def install_error_handlers(app: FastAPI) -> None:
    def reply(request: Request, body: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(shaped(request.url.path, status, body), status, headers=headers)

    @app.exception_handler(ToolserveError)
    async def _ours(request: Request, exc: ToolserveError) -> JSONResponse:
        if exc.status >= 500:
            log.error("%s: %s", type(exc).__name__, exc.message)
        return reply(request, error_of(exc), exc.status, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return reply(request, *_validation_response(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return reply(request, error_body(str(exc.detail), kind, None, code), exc.status_code)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        log.info("%s %s: the client left before the answer; its generation stopped", request.method, request.url.path)
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return reply(request, error_body(f"internal error: {type(exc).__name__}", "server_error"), 500)
