"""Two local models answering at once share the cores (engine/cores.py): both finish, each
answers as it does alone, and their engines count the decodes that ran on their share."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.conftest import Server
from tests.e2e.test_load import NO_EOS
from toolserve.engine import cores

TOKENS = 48


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two models on the bundled file, each with threads for all the cores: together they
    outnumber the cores on any host."""
    path = tmp_path_factory.mktemp("shares") / "models.yaml"
    n = cores.count()
    path.write_text(
        "keep_alive: null\nmodels:\n"
        + "".join(f"  - id: {m}\n    ctx_size: 1024\n    parallel: 1\n    threads: {n}\n    preload: true\n" for m in ("a", "b"))
    )
    srv = Server(["--config", str(path)])
    yield srv
    srv.stop()


async def story(client: httpx.AsyncClient, model: str) -> str:
    body = {
        "model": model, "stream": True, "max_tokens": TOKENS, "temperature": 0, "logit_bias": NO_EOS,
        "messages": [{"role": "user", "content": "Tell me a story about a lighthouse."}],
    }
    text = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                chunk = httpx.Response(200, content=line[6:]).json()
                for choice in chunk["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


def shared(srv: Server) -> dict[str, int]:
    health = httpx.get(f"{srv.url}/health").json()
    return {m: health["models"][m]["shared_decodes"] for m in ("a", "b")}


def test_two_models_at_once_share_the_cores_and_answer_as_alone(pair: Server) -> None:
    async def run() -> tuple[list[str], list[str]]:
        async with httpx.AsyncClient(base_url=pair.url, timeout=300) as client:
            alone = [await story(client, "a"), await story(client, "b")]
            together = list(await asyncio.gather(story(client, "a"), story(client, "b")))
            return alone, together

    before = shared(pair)
    alone, together = asyncio.run(run())
    assert alone[0] and alone[0] == alone[1]  # the same weights, prompt and greedy sampling
    assert together == alone  # llama.cpp's CPU kernels give the same results on fewer threads
    after = shared(pair)
    assert after["a"] > before["a"] and after["b"] > before["b"]  # each decoded on its share while the other was busy



@pytest.fixture(scope="module")
def with_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The bundled model beside a tiny vision model, each with threads for all the cores."""
    from tests.vision.make_tiny_vlm import build

    model, mmproj = build()
    n = cores.count()
    path = tmp_path_factory.mktemp("shares-images") / "models.yaml"
    path.write_text(
        "keep_alive: null\nmodels:\n"
        f"  - id: a\n    ctx_size: 1024\n    parallel: 1\n    threads: {n}\n    preload: true\n"
        f"  - id: vlm\n    model: {model}\n    mmproj: {mmproj}\n    ctx_size: 2048\n    parallel: 1\n    threads: {n}\n    preload: true\n"
    )
    srv = Server(["--config", str(path)])
    yield srv
    srv.stop()


async def describe(client: httpx.AsyncClient, shade: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (168, 112), (shade, 30, 30)).save(buf, "PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    body = {
        "model": "vlm", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "Describe the picture."}]}],
    }
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_images_read_while_another_model_streams(with_images: Server) -> None:
    """Images evaluated alone (the encoder keeps its threads) while the other model streams on
    its share: nothing stalls, and both answer as they do alone."""
    shades = [40, 90, 140, 190]

    async def run() -> tuple[list[Any], list[Any]]:
        async with httpx.AsyncClient(base_url=with_images.url, timeout=300) as client:
            alone = [await story(client, "a"), *[await describe(client, s) for s in shades]]

            async def images() -> list[str]:
                return [await describe(client, s) for s in shades]

            text, described = await asyncio.gather(story(client, "a"), images())
            return alone, [text, *described]

    alone, together = asyncio.run(run())
    assert together == alone
