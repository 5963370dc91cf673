"""GET / and /web/{file}: the chat page, plain HTML, CSS and JavaScript shipped in the package
(`toolserve/web/`), read once at start. `toolserve serve --no-web` leaves these routes out."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.exceptions import HTTPException

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

# The page talks to this server only, runs no inline code, and loads no image but the user's
# own attachments (data: and blob: URLs): model output rendered as Markdown can fetch nothing.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Every file of the page by name, with its media type."""
    folder = files("toolserve.web")
    out = {}
    for item in folder.iterdir():
        kind = MEDIA_TYPES.get("." + item.name.rsplit(".", 1)[-1])
        if kind is not None and item.is_file():
            out[item.name] = (item.read_bytes(), kind)
    return out


def web_router() -> APIRouter:
    router = APIRouter()
    assets = load_assets()

    def serve(name: str) -> Response:
        if name not in assets:
            raise HTTPException(404, f"No file '{name}' in the chat page.")
        body, kind = assets[name]
        return Response(body, media_type=kind, headers=HEADERS)

    @router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> Response:
        return serve("index.html")

    @router.api_route("/web/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    async def asset(name: str) -> Response:
        return serve(name)

    return router
