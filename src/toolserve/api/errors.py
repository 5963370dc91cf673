"""The one place where exceptions become error responses: OpenAI's shape, Anthropic's on the
Messages API's routes, Ollama's (`{"error": "..."}`) on its /api/* routes."""

from __future__ import annotations

import logging
import re
from contextvars import ContextVar
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from toolserve.api.openai.schemas import REQUEST_TEXT_ERRORS
from toolserve.errors import ClientGone, ToolserveError, log_failure

log = logging.getLogger(__name__)

# the id the Guard gives each request (its X-Request-Id), for the code that runs within it
REQUEST_ID: ContextVar[str] = ContextVar("toolserve_request_id", default="-")


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_of(exc: ToolserveError) -> dict[str, Any]:
    """The error object of `exc`. A server-side failure (5xx) is logged with the request's id,
    which its message gives: the place to find it in the log. Such messages are written by us
    and never carry request data (`toolserve.errors.log_failure`)."""
    message = exc.message
    if exc.status >= 500:
        rid = REQUEST_ID.get()
        log.error("%s %s: %s", rid, type(exc).__name__, exc.message)
        message = f"{message} (request {rid})"
    return error_body(message, exc.type, exc.param, exc.code)


def unexpected_error(exc: Exception) -> ToolserveError:
    """An exception none of our code expected, logged (without its message) and answered as a
    500 that names its type and the request's id."""
    log_failure(log, f"{REQUEST_ID.get()} unexpected error", exc)
    return ToolserveError(f"internal error: {type(exc).__name__}")


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


def is_ollama(path: str) -> bool:
    return path.startswith("/api/")


def shaped(path: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI error body in the shape of the protocol that `path` belongs to."""
    if is_anthropic(path):
        return anthropic_error(status, body["error"]["message"])
    if is_ollama(path):
        return {"error": body["error"]["message"]}
    return body


def status_for(path: str, status: int) -> int:
    """The protocol's status for one of ours: Ollama answers a full queue with 503 (its
    ErrMaxQueue), where OpenAI's and Anthropic's clients expect 429."""
    return 503 if status == 429 and is_ollama(path) else status


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
    if first.get("type") in REQUEST_TEXT_ERRORS:  # found by the body's own check: it names the place
        ctx = first.get("ctx")
        where = ctx.get("param") if isinstance(ctx, dict) else None
        return error_body(str(first["msg"]), "invalid_request_error", where, REQUEST_TEXT_ERRORS[str(first["type"])]), 400
    loc = tuple(first.get("loc", ()))
    param = _param(loc)
    if first.get("type") == "missing":
        msg = f"Missing required parameter: '{param}'."
        code = "missing_required_parameter"
    else:
        # pydantic names our model classes ("a valid dictionary or instance of OtherItem"): say what JSON needs
        said = "Input should be an object" if first.get("type") in ("model_type", "model_attributes_type") else first["msg"]
        msg = f"Invalid value for '{param}': {said}." if param else f"Invalid request: {said}."
        code = "invalid_value"
    return error_body(msg, "invalid_request_error", param, code), 400


def install_error_handlers(app: FastAPI) -> None:
    def reply(request: Request, body: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> JSONResponse:
        path = request.url.path
        return JSONResponse(shaped(path, status, body), status_for(path, status), headers=headers)

    @app.exception_handler(ToolserveError)
    async def _ours(request: Request, exc: ToolserveError) -> JSONResponse:
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
        return reply(request, error_of(unexpected_error(exc)), 500)
