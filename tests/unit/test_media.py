"""Image sources and decoding: every refusal and cap, with real files and a real local HTTP server."""

from __future__ import annotations

import asyncio
import base64
import http.server
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from toolserve.serving.media import ImagePolicy, ImageRefused, decode_image, load_image
from toolserve.types import ImageData

WHERE = "messages[1].content[2]"


def png(width: int = 4, height: int = 3, color: tuple[int, ...] = (200, 10, 10), mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (width, height), color).save(buf, "PNG")
    return buf.getvalue()


def data_uri(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def load(url: str, policy: ImagePolicy | None = None) -> ImageData:
    return asyncio.run(load_image(url, policy or ImagePolicy(), WHERE))


def refused(url: str, policy: ImagePolicy | None = None) -> str:
    with pytest.raises(ImageRefused) as info:
        load(url, policy)
    assert info.value.param == WHERE and WHERE in info.value.message
    return info.value.message


def test_data_uri_decodes_to_rgb() -> None:
    img = load(data_uri(png(4, 3)))
    assert (img.width, img.height) == (4, 3)
    assert img.rgb[:3] == bytes((200, 10, 10)) and len(img.rgb) == 4 * 3 * 3


def test_digest_follows_pixels_not_encoding() -> None:
    pixels = Image.new("RGB", (5, 5), (1, 2, 3))
    as_png, as_bmp = io.BytesIO(), io.BytesIO()
    pixels.save(as_png, "PNG")
    pixels.save(as_bmp, "BMP")
    assert load(data_uri(as_png.getvalue())).digest == load(data_uri(as_bmp.getvalue(), "image/bmp")).digest
    assert load(data_uri(png(5, 5, (1, 2, 4)))).digest != load(data_uri(as_png.getvalue())).digest


def test_transparency_is_flattened_onto_white() -> None:
    img = load(data_uri(png(2, 2, (0, 0, 0, 0), mode="RGBA")))
    assert img.rgb == bytes((255, 255, 255)) * 4
    pal = Image.new("P", (2, 2), 0)
    pal.putpalette([10, 20, 30] + [0] * 765)
    buf = io.BytesIO()
    pal.save(buf, "PNG")
    assert load(data_uri(buf.getvalue())).rgb == bytes((10, 20, 30)) * 4


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    Image.new("RGB", (8, 2), (50, 50, 50)).save(buf, "JPEG", exif=exif)
    img = load(data_uri(buf.getvalue(), "image/jpeg"))
    assert (img.width, img.height) == (2, 8)


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("data:text/plain;base64,aGk=", "data:image/"),
        ("data:image/png,rawbytes", "data:image/"),
        ("data:image/png;base64,@@@@", "not valid base64"),
        (data_uri(b"not an image at all"), "cannot be decoded"),
        (data_uri(png()[:30]), "cannot be decoded"),
        ("ftp://example.com/a.png", "unsupported image URL scheme"),
        ("relative/path.png", "unsupported image URL scheme"),
    ],
)
def test_bad_images_are_400s(url: str, expect: str) -> None:
    assert expect in refused(url)


def test_byte_cap() -> None:
    raw = png(64, 64)
    assert "limit of 100 bytes" in refused(data_uri(raw), ImagePolicy(max_bytes=100))
    with pytest.raises(ImageRefused):
        decode_image(raw, ImagePolicy(max_bytes=100), WHERE)


def test_pixel_cap_reads_the_header_only() -> None:
    assert "65x64 pixels" in refused(data_uri(png(65, 64)), ImagePolicy(max_pixels=64 * 64))
    assert load(data_uri(png(64, 64)), ImagePolicy(max_pixels=64 * 64)).width == 64


# -- local files ---------------------------------------------------------------------------------
def test_files_are_off_by_default(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png())
    assert "--allow-image-files" in refused(str(tmp_path / "a.png"))
    assert "--allow-image-files" in refused(f"file://{tmp_path / 'a.png'}")


def test_files_only_inside_the_allowed_dir(tmp_path: Path) -> None:
    allowed, other = tmp_path / "images", tmp_path / "secret"
    allowed.mkdir()
    other.mkdir()
    (allowed / "a.png").write_bytes(png())
    (other / "b.png").write_bytes(png())
    (allowed / "link.png").symlink_to(other / "b.png")
    policy = ImagePolicy(files_dir=allowed)
    assert load(str(allowed / "a.png"), policy).width == 4
    assert load(f"file://{allowed / 'a.png'}", policy).width == 4
    assert "may only come from" in refused(str(other / "b.png"), policy)
    assert "may only come from" in refused(str(allowed / ".." / "secret" / "b.png"), policy)
    assert "may only come from" in refused(str(allowed / "link.png"), policy)  # a symlink out
    assert "cannot read" in refused(str(allowed / "missing.png"), policy)


# -- URLs, against a real HTTP server on loopback ------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow.png":
            time.sleep(1.5)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/a.png")
            self.end_headers()
            return
        if self.path == "/missing.png":
            self.send_response(404)
            self.end_headers()
            return
        body = png(7, 7)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_base() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_urls_are_off_by_default(http_base: str) -> None:
    assert "--allow-image-urls" in refused(f"{http_base}/a.png")


def test_private_addresses_need_their_own_flag(http_base: str) -> None:
    assert "--allow-private-urls" in refused(f"{http_base}/a.png", ImagePolicy(allow_urls=True))
    assert "--allow-private-urls" in refused("http://localhost:1/a.png", ImagePolicy(allow_urls=True))
    assert "--allow-private-urls" in refused("http://10.1.2.3/a.png", ImagePolicy(allow_urls=True))


def test_allowed_url_is_fetched_and_redirects_followed(http_base: str) -> None:
    policy = ImagePolicy(allow_urls=True, allow_private_urls=True)
    assert load(f"{http_base}/a.png", policy).width == 7
    assert load(f"{http_base}/redirect", policy).width == 7
    assert "HTTP 404" in refused(f"{http_base}/missing.png", policy)


def test_url_time_and_size_limits(http_base: str) -> None:
    assert "longer than 0.5 s" in refused(f"{http_base}/slow.png", ImagePolicy(allow_urls=True, allow_private_urls=True, fetch_timeout=0.5))
    assert "limit of 50 bytes" in refused(f"{http_base}/a.png", ImagePolicy(allow_urls=True, allow_private_urls=True, max_bytes=50))
