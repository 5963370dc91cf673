"""One exception hierarchy; `api/errors.py` maps it to OpenAI error JSON in one place."""

from __future__ import annotations

import logging
import traceback


class ToolserveError(Exception):
    """Base class. `status`, `type` and `code` become the OpenAI error object."""

    status = 500
    type = "server_error"
    code: str | None = None
    headers: dict[str, str] | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequest(ToolserveError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class TemplateError(InvalidRequest):
    """The conversation cannot be rendered by the chat template (the template raised)."""

    code = "template_error"


class BrokenTemplate(ToolserveError):
    """The template itself is broken (syntax error, sandbox violation): a server-side fault."""

    status = 500
    type = "server_error"
    code = "template_broken"


class ModelNotFound(ToolserveError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class Unsupported(InvalidRequest):
    code = "unsupported"


class Overloaded(ToolserveError):
    status = 429
    type = "rate_limit_error"
    code = "overloaded"

    def __init__(self, message: str, *, retry_after: int = 1):
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class ShuttingDown(ToolserveError):
    status = 503
    type = "server_error"
    code = "shutting_down"


class RequestTimeout(ToolserveError):
    status = 504
    type = "server_error"
    code = "request_timeout"


class EngineFailure(ToolserveError):
    status = 500
    type = "server_error"
    code = "engine_failure"


class EngineUnavailable(ToolserveError):
    """The model's engine process died or hung (its requests end with this), or failed too often
    to be restarted (then every request gets it)."""

    status = 503
    type = "engine_unavailable"
    code = "engine_unavailable"


class ModelLoadError(ToolserveError):
    """The model file is missing or unreadable; raised at start-up, never per request."""

    code = "model_load_error"


class ModelBusy(ToolserveError):
    """The model has requests in flight (an explicit unload must wait for them)."""

    status = 409
    type = "invalid_request_error"
    code = "model_busy"


class InsufficientMemory(ToolserveError):
    """Loading the model would pass the memory budget, even after unloading idle models."""

    status = 503
    type = "server_error"
    code = "insufficient_memory"

    def __init__(self, message: str, *, retry_after: int | None = None):
        super().__init__(message)
        if retry_after is not None:
            self.headers = {"Retry-After": str(retry_after)}


class UpstreamUnavailable(ToolserveError):
    """The upstream server of a model cannot be reached (down, or not checked back up yet)."""

    status = 503
    type = "server_error"
    code = "upstream_unavailable"

    def __init__(self, message: str, *, retry_after: int = 1):
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class UpstreamTimeout(ToolserveError):
    """The upstream sent nothing for longer than its timeout."""

    status = 504
    type = "server_error"
    code = "upstream_timeout"


class UpstreamError(ToolserveError):
    """The upstream answered with an error: its 4xx as they are, its 5xx as a 502."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 502,
        type_: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message, param=param, code=code or ("upstream_error" if status >= 500 else None))
        self.status = status
        self.type = type_ or ("server_error" if status >= 500 else "invalid_request_error")
        self.headers = headers


class ClientGone(Exception):
    """The client left before its answer was ready: its work is cancelled and api/errors.py
    answers with an empty 499 that nobody reads (not a server error in the log)."""


def described(exc: BaseException) -> str:
    """An unexpected exception as a client or a log may see it: its type and the place that
    raised it, never its message, which may hold request data (a KeyError's key was a prompt's
    token ids: issue 31)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} in {last.name} ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})"


def log_failure(log: logging.Logger, what: str, exc: BaseException) -> None:
    """Log an unexpected exception with its stack but without its message (see `described`)."""
    stack = "".join(traceback.format_list(traceback.extract_tb(exc.__traceback__)))
    log.error("%s: %s\nTraceback (most recent call last):\n%s%s (message withheld: it may hold request data)",
              what, described(exc), stack, type(exc).__name__)
