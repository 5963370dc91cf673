"""Who may talk to the server and how much they may send: API key, Host check, Origin check,
body cap, request ids. One pure ASGI middleware, so streaming responses pass through untouched."""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from toolserve.api.errors import REQUEST_ID, error_body, shaped

log = logging.getLogger("toolserve.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
# origins allowed unless --cors-origins names others: pages served from this machine, and (as
# Ollama allows by default) local apps and browser extensions, which no web site can pose as:
# Obsidian (app://obsidian.md), Tauri apps, VS Code's webviews, extensions such as Page Assist
LOCAL_ORIGINS = (
    r"^(https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
    r"|(app|tauri|vscode-webview|vscode-file|chrome-extension|moz-extension|safari-web-extension)://[^/\s]+)$"
)
# the methods a web page may send cross-site that change nothing here (reads are guarded by CORS)
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# what answers without the API key: health checks, metrics scrapers, the chat page (which asks
# for the key itself), the API's own description and Ollama's version (clients probe it to find
# the server); every route that computes needs the key
OPEN_PATHS = {"/health", "/metrics", "/", "/favicon.ico", "/openapi.json", "/docs", "/redoc", "/api/version"}


def needs_key(path: str) -> bool:
    return path not in OPEN_PATHS and not path.startswith("/web/")


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header ('[::1]:8000' -> '::1', 'a:80' -> 'a')."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class GuardSettings:
    api_key: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    loopback_only: bool = True  # bound to loopback: refuse other Host names (DNS rebinding)
    origins: tuple[str, ...] = ()  # --cors-origins ("*": any); none: LOCAL_ORIGINS

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Whether a page of `origin` may make this server compute or change state: the
        server's own pages (same host and port), the allowed origins, nothing else ("null",
        a sandboxed or file page, included)."""
        if origin in (f"http://{host}", f"https://{host}"):
            return True
        if self.origins:
            return "*" in self.origins or origin in self.origins
        return re.match(LOCAL_ORIGINS, origin) is not None


class Guard:
    def __init__(self, app: ASGIApp, settings: GuardSettings, on_response: Callable[[str, int], None] | None = None):
        self.app = app
        self.settings = settings
        self.on_response = on_response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req_{uuid.uuid4().hex[:16]}"
        scope.setdefault("state", {})["request_id"] = request_id  # request.state.request_id in routes
        REQUEST_ID.set(request_id)  # and for errors (api/errors.py): this task and those it starts
        started = time.perf_counter()
        status = 0
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}

        overflow = [False]  # set once the body passes the cap
        logged = False

        def finished() -> None:
            """Count and log the request, once: before its last byte goes out (so a client that has
            its answer finds it in the log and in /metrics), or when the app ends without one."""
            nonlocal logged
            if logged:
                return
            logged = True
            if self.on_response is not None:
                self.on_response(scope.get("path", ""), status)
            log.info(
                "%s %s %s %d %.1f ms", request_id, scope.get("method"), scope.get("path"), status,
                (time.perf_counter() - started) * 1000,
            )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished()
            await send(message)

        async def send_unless_overflow(message: Message) -> None:
            if overflow[0]:  # the app saw a cut-off body: answer 413 in its place
                if message["type"] == "http.response.start":
                    await self._reply(send_with_id, 413, shaped(scope.get("path", ""), 413, self._too_large()))
                return
            await send_with_id(message)

        try:
            refusal = self._refusal(scope, headers)
            if refusal is not None:
                status_, body = refusal
                await self._reply(send_with_id, status_, shaped(scope.get("path", ""), status_, body))
                return
            await self.app(scope, self._capped(receive, overflow), send_unless_overflow)
        finally:
            finished()

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        s = self.settings
        if s.loopback_only and not is_loopback(host_of(headers.get("host", "localhost"))):
            msg = "Host header names a non-loopback host; this server only answers to localhost."
            return 403, error_body(msg, "permission_error", None, "host_not_allowed")
        origin = headers.get("origin")
        if origin is not None and scope.get("method") not in SAFE_METHODS and not s.origin_allowed(origin, headers.get("host", "")):
            # a page elsewhere can send simple requests (no preflight) that CORS does not stop: a
            # form post or a body-less fetch would otherwise run here (unload a model, generate)
            msg = f"Requests from the web origin {origin[:200]!r} are not allowed; start the server with --cors-origins to allow it."
            return 403, error_body(msg, "permission_error", None, "origin_not_allowed")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > s.max_body_bytes:
            return 413, self._too_large()
        if s.api_key and needs_key(scope.get("path", "")) and scope.get("method") != "OPTIONS":
            given = headers.get("authorization", "")
            # a Bearer token, or Anthropic's x-api-key header (Claude Code, the anthropic client)
            token = given[7:] if given.lower().startswith("bearer ") else headers.get("x-api-key", "")
            if not hmac.compare_digest(token.encode(), s.api_key.encode()):
                msg = "Incorrect or missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."
                return 401, error_body(msg, "invalid_request_error", None, "invalid_api_key")
        return None

    def _too_large(self) -> dict[str, Any]:
        msg = f"Request body is larger than the limit of {self.settings.max_body_bytes} bytes."
        return error_body(msg, "invalid_request_error", None, "request_too_large")

    def _capped(self, receive: Receive, overflow: list[bool]) -> Receive:
        """Count body bytes as they arrive (a chunked body has no Content-Length to check); past
        the cap the app gets an ended, empty body and its answer is replaced by a 413."""
        seen = 0
        cap = self.settings.max_body_bytes

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    overflow[0] = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        return wrapped

    @staticmethod
    async def _reply(send: Send, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, allow_nan=False).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
