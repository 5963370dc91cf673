"""Images through the whole path on a tiny random Qwen2-VL (tests/vision/make_tiny_vlm.py):
image parts -> decode -> projector encode -> generation -> response, streaming and not.

Its words are noise; the assertions are on the path: prompt tokens follow the model's image-token
count, streaming equals non-streaming, a resent image hits the prompt cache, calls stay valid."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.conftest import Server

PATCH_MERGE = 28  # Qwen2-VL: 14-pixel patches merged 2x2 -> one token per 28x28 pixels


def image_uri(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image_tokens(width: int, height: int) -> int:
    """Qwen2-VL's count for sizes its resizing keeps (multiples of 28 from 84 up)."""
    return (round(width / PATCH_MERGE)) * (round(height / PATCH_MERGE))


def ask(*parts: dict[str, Any], text: str = "Describe the picture.") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def img(uri: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": uri}}


@pytest.fixture(scope="module")
def vlm() -> Iterator[Server]:
    from tests.vision.make_tiny_vlm import build

    model, mmproj = build()
    srv = Server(["--model", str(model), "--mmproj", str(mmproj), "--ctx-size", "2048", "--threads", "1"])
    yield srv
    srv.stop()


def chat(srv: Server, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, **extra}
    r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_models_say_images_are_accepted(vlm: Server) -> None:
    card = httpx.get(f"{vlm.url}/v1/models").json()["data"][0]
    assert card["toolserve"]["vision"] is True
    assert card["toolserve"]["input_modalities"] == ["text", "image"]


def test_prompt_tokens_follow_the_image_token_count(vlm: Server) -> None:
    sizes = [(84, 84), (252, 252), (504, 504), (504, 252)]
    used = {s: chat(vlm, ask(img(image_uri(*s))))["usage"]["prompt_tokens"] for s in sizes}
    base = used[(84, 84)] - image_tokens(84, 84)
    for s in sizes:
        assert used[s] - base == image_tokens(*s)
    assert used[(84, 84)] < used[(252, 252)] < used[(504, 504)]


def test_several_images_in_a_message_and_across_turns(vlm: Server) -> None:
    one = chat(vlm, ask(img(image_uri(84, 84))))["usage"]["prompt_tokens"]
    two = chat(vlm, ask(img(image_uri(84, 84)), img(image_uri(168, 168))))["usage"]["prompt_tokens"]
    assert two - one == image_tokens(168, 168) + 2  # with its <|vision_start|> and <|vision_end|>
    turns = [
        *ask(img(image_uri(84, 84))),
        {"role": "assistant", "content": "A red square."},
        *ask(img(image_uri(168, 168, (0, 0, 255))), text="And this one?"),
    ]
    assert chat(vlm, turns)["choices"][0]["finish_reason"] in ("stop", "length")


def test_stream_equals_non_streaming(vlm: Server) -> None:
    messages = ask(img(image_uri(252, 168)))
    whole = chat(vlm, messages, max_tokens=12, seed=3)
    text, usage = [], None
    body = {"messages": messages, "max_tokens": 12, "temperature": 0, "seed": 3, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{vlm.url}/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk["choices"]:
                    text.append(c["delta"].get("content") or "")
    assert "".join(text) == whole["choices"][0]["message"]["content"]
    assert usage is not None and usage["prompt_tokens"] == whole["usage"]["prompt_tokens"]


def test_resent_image_hits_the_prompt_cache(vlm: Server) -> None:
    picture = image_uri(504, 504, (10, 120, 40))
    first = ask(img(picture), text="What is it?")
    a = chat(vlm, first)
    follow = [*first, {"role": "assistant", "content": a["choices"][0]["message"]["content"]}, {"role": "user", "content": "Say more."}]
    b = chat(vlm, follow)
    cached = b["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= image_tokens(504, 504)  # the image was not encoded again
    other = chat(vlm, ask(img(image_uri(504, 504, (11, 120, 40))), text="What is it?"))  # one pixel value differs
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] < image_tokens(504, 504)
    again = chat(vlm, first)  # the first conversation again: restored, and the same answer
    assert again["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= image_tokens(504, 504)


def test_tool_call_and_json_with_an_image(vlm: Server) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "tag_image",
            "parameters": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 12}}, "required": ["label"]},
        },
    }
    out = chat(vlm, ask(img(image_uri(84, 84))), tools=[tool], tool_choice="required", parallel_tool_calls=False, max_tokens=64)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert isinstance(json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])["label"], str)
    # bounded values: a random model fills an unbounded integer with digits until max_tokens
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "count", "schema": schema}}
    out = chat(vlm, ask(img(image_uri(84, 84))), response_format=fmt, max_tokens=32)
    assert isinstance(json.loads(out["choices"][0]["message"]["content"])["n"], int)


@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        (ask(img("data:image/png;base64,!!!")), "messages[0].content[0]", "base64"),
        (ask(img("data:image/png;base64," + base64.b64encode(b"not a png").decode())), "messages[0].content[0]", "cannot be decoded"),
        (ask(img("https://example.com/cat.png")), "messages[0].content[0]", "--allow-image-urls"),
        (ask(img("/etc/passwd")), "messages[0].content[0]", "--allow-image-files"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [img(image_uri(84, 84))]}], "messages[1].content[0]", "user messages"),
    ],
)
def test_refusals_are_400s_naming_the_part(vlm: Server, messages: list[dict[str, Any]], param: str, words: str) -> None:
    r = httpx.post(f"{vlm.url}/v1/chat/completions", json={"messages": messages, "max_tokens": 4}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"]
    assert httpx.get(f"{vlm.url}/health").status_code == 200


def test_text_only_model_refuses_images(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": ask(img(image_uri(84, 84))), "max_tokens": 4}, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages[0].content[0]" and "text only" in err["message"]
    assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["toolserve"]["vision"] is False


def test_image_count_cap(vlm: Server) -> None:
    tiny = image_uri(8, 8)
    r = httpx.post(f"{vlm.url}/v1/chat/completions", json={"messages": ask(*[img(tiny)] * 17), "max_tokens": 2}, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "messages" and "'images' is 17" in err["message"]
