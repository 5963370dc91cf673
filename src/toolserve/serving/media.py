"""Images from a request: where they may come from, how big they may be, and their decoding.

Sources, each refused unless allowed:
- `data:image/...;base64,...` URIs: always accepted;
- `http(s)://` URLs: only with `--allow-image-urls`; never to private, loopback or link-local
  addresses unless `--allow-private-urls`; bounded in time and bytes; redirects re-checked;
- local files (`file://` URLs or absolute paths): only with `--allow-image-files DIR`, and only
  inside DIR once symlinks are resolved.
Every refusal is a 400 that names the message and the part it came from.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import io
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from toolserve.errors import InvalidRequest
from toolserve.types import ImageData

MAX_REDIRECTS = 3


@dataclass(frozen=True)
class ImagePolicy:
    """`toolserve serve` flags that decide which images a request may bring."""

    allow_urls: bool = False  # --allow-image-urls
    allow_private_urls: bool = False  # --allow-private-urls: also loopback / LAN addresses
    files_dir: Path | None = None  # --allow-image-files DIR
    max_bytes: int = 20 * 1024 * 1024  # --max-image-mb: encoded size
    max_pixels: int = 4096 * 4096  # --max-image-pixels: width x height
    fetch_timeout: float = 10.0  # seconds for one URL, redirects included


def decoded(width: int, height: int, rgb: bytes) -> ImageData:
    h = hashlib.sha256(f"{width}x{height}:".encode())
    h.update(rgb)
    return ImageData(width, height, rgb, h.hexdigest())


class ImageRefused(InvalidRequest):
    """A 400: an image part that cannot be used, with the part named in `param`."""


async def load_image(url: str, policy: ImagePolicy, where: str) -> ImageData:
    """Fetch (if allowed) and decode the image of one `image_url` part at `where`."""
    raw = await read_source(url, policy, where)
    return await asyncio.to_thread(decode_image, raw, policy, where)


async def read_source(url: str, policy: ImagePolicy, where: str) -> bytes:
    scheme = urlsplit(url).scheme.lower() if "://" in url or url.startswith("data:") else ""
    if scheme == "data":
        return read_data_uri(url, policy, where)
    if scheme in ("http", "https"):
        if not policy.allow_urls:
            raise ImageRefused(
                f"{where}: image URLs are turned off on this server (start it with --allow-image-urls); "
                "send the image as a data: URI instead.",
                param=where,
            )
        return await fetch_url(url, policy, where)
    if scheme == "file" or url.startswith("/"):
        return read_file(unquote(urlsplit(url).path) if scheme == "file" else url, policy, where)
    raise ImageRefused(f"{where}: unsupported image URL scheme '{scheme or url[:16]}'; use a data: URI.", param=where)


def read_data_uri(url: str, policy: ImagePolicy, where: str) -> bytes:
    header, sep, payload = url.partition(",")
    if not sep or not header.startswith("data:image/") or not header.endswith(";base64"):
        raise ImageRefused(f"{where}: a data URI must look like data:image/<type>;base64,<data>.", param=where)
    if len(payload) * 3 // 4 > policy.max_bytes:
        raise ImageRefused(f"{where}: the image is larger than this server's limit of {policy.max_bytes} bytes.", param=where)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused(f"{where}: the data URI is not valid base64.", param=where) from None


def read_file(path: str, policy: ImagePolicy, where: str) -> bytes:
    if policy.files_dir is None:
        raise ImageRefused(
            f"{where}: local image files are turned off on this server (start it with --allow-image-files DIR).",
            param=where,
        )
    root = policy.files_dir.resolve()
    target = Path(path).resolve()
    if not target.is_relative_to(root):
        raise ImageRefused(f"{where}: image files may only come from {root}.", param=where)
    try:
        size = target.stat().st_size
        if size > policy.max_bytes:
            raise ImageRefused(f"{where}: the image is larger than this server's limit of {policy.max_bytes} bytes.", param=where)
        return target.read_bytes()
    except OSError as exc:
        raise ImageRefused(f"{where}: cannot read the image file: {exc.strerror}.", param=where) from None


def is_public_host(host: str, port: int) -> bool:
    """True when every address the name resolves to is a public one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return True  # unresolvable: the fetch itself fails with a clear message
    for info in infos:
        ip = ipaddress.ip_address(info[4][0])
        if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast or ip.is_unspecified:
            return False
    return True


async def fetch_url(url: str, policy: ImagePolicy, where: str) -> bytes:
    import httpx

    async def fetch(client: httpx.AsyncClient, url: str) -> bytes:
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ImageRefused(f"{where}: the image URL redirected to a non-HTTP address.", param=where)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if not policy.allow_private_urls and not await asyncio.to_thread(is_public_host, parts.hostname, port):
                raise ImageRefused(
                    f"{where}: the image URL points to a private or local address; "
                    "this server fetches those only with --allow-private-urls.",
                    param=where,
                )
            async with client.stream("GET", url) as resp:
                if resp.is_redirect and "location" in resp.headers:
                    url = urljoin(url, resp.headers["location"])  # checked again on the next round
                    continue
                if resp.status_code != 200:
                    raise ImageRefused(f"{where}: fetching the image gave HTTP {resp.status_code}.", param=where)
                data = bytearray()
                async for block in resp.aiter_bytes():
                    data += block
                    if len(data) > policy.max_bytes:
                        raise ImageRefused(
                            f"{where}: the image is larger than this server's limit of {policy.max_bytes} bytes.",
                            param=where,
                        )
                return bytes(data)
        raise ImageRefused(f"{where}: the image URL redirected more than {MAX_REDIRECTS} times.", param=where)

    async with httpx.AsyncClient(timeout=policy.fetch_timeout, follow_redirects=False, trust_env=False) as client:
        try:
            return await asyncio.wait_for(fetch(client, url), policy.fetch_timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise ImageRefused(f"{where}: fetching the image took longer than {policy.fetch_timeout:g} s.", param=where) from None
        except httpx.HTTPError as exc:
            raise ImageRefused(f"{where}: cannot fetch the image: {exc}.", param=where) from None


def decode_image(raw: bytes, policy: ImagePolicy, where: str) -> ImageData:
    """Decode with Pillow: EXIF orientation applied, transparency flattened onto white, RGB out."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(raw) > policy.max_bytes:
        raise ImageRefused(f"{where}: the image is larger than this server's limit of {policy.max_bytes} bytes.", param=where)
    try:
        with Image.open(io.BytesIO(raw)) as img:
            width, height = img.size  # read from the header, before any pixel is decoded
            if width * height > policy.max_pixels:
                raise ImageRefused(
                    f"{where}: the image is {width}x{height} pixels, over this server's limit of {policy.max_pixels} pixels.",
                    param=where,
                )
            img.seek(0)  # the first frame of an animation
            out = ImageOps.exif_transpose(img)
            if out.mode in ("RGBA", "LA", "PA") or (out.mode == "P" and "transparency" in out.info):
                rgba = out.convert("RGBA")
                flat = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                flat.alpha_composite(rgba)
                out = flat
            rgb = out.convert("RGB")
            return decoded(rgb.width, rgb.height, rgb.tobytes())
    except ImageRefused:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageRefused(f"{where}: the image cannot be decoded: {exc}.", param=where) from None
