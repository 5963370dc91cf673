"""Ollama's API end to end with the official `ollama` Python client against a real `toolserve
serve`: chat and generate (streamed and not), format with a schema, a tool call and its result
(and `think`) through a raw upstream that answers with a model's canned text, images on the tiny
vision model, embeddings, list / show / ps, keep_alive; raw HTTP for the error shapes and the
NDJSON framing."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import numpy as np
import ollama
import pytest
from PIL import Image

from tests.conftest import Server
from tests.e2e.test_formats_raw import CannedUpstream

SMOL = "SmolLM2-135M-Instruct.Q4_1"
MINILM = "all-MiniLM-L6-v2-f16"
ASK = [{"role": "user", "content": "Name three colours."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# a Qwen 3-like template: hermes calls, a thinking switch
QWEN3_LIKE = (
    "{% if tools %}<|im_start|>system\nCall tools inside <tool_call></tool_call> tags.\n<tools>"
    "{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    from tests.embeddings.make_minilm import build

    s = Server(["--ctx-size", "2048", "--parallel", "1", "--embedding-model", str(build())])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv: Server) -> ollama.Client:
    return ollama.Client(host=srv.url, timeout=300)


@pytest.fixture(scope="module")
def upstream() -> Iterator[CannedUpstream]:
    u = CannedUpstream()
    yield u
    u.stop()


@pytest.fixture(scope="module")
def qwen(upstream: CannedUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("qwen") / "qwen.jinja"
    path.write_text(QWEN3_LIKE, encoding="utf-8")
    s = Server(["--upstream", upstream.url, "--upstream-mode", "raw", "--chat-template", str(path), "--model-alias", "qwen-raw"])
    yield s
    s.stop()


def greedy(n: int = 12) -> dict[str, Any]:
    return {"temperature": 0, "num_predict": n}


def test_chat_streamed_equals_whole(client: ollama.Client) -> None:
    whole = client.chat(model=SMOL, messages=ASK, options=greedy(), stream=False)
    chunks = list(client.chat(model=SMOL, messages=ASK, options=greedy(), stream=True))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c.message.content or "" for c in chunks) == whole.message.content and whole.message.content
    last = chunks[-1]
    assert last.message.content == "" and last.done_reason == whole.done_reason == "length"
    assert last.eval_count == whole.eval_count == 12
    assert last.prompt_eval_count == whole.prompt_eval_count > 0
    for r in (last, whole):  # durations in nanoseconds, the total covering the parts
        assert r.total_duration >= r.prompt_eval_duration + r.eval_duration > 0 and r.load_duration >= 0
    assert whole.model == SMOL and whole.created_at.endswith("Z")


def test_generate_streamed_equals_whole_and_names_take_a_tag(client: ollama.Client) -> None:
    whole = client.generate(model=f"{SMOL}:latest", prompt="The sky is", options=greedy(8), stream=False)
    parts = list(client.generate(model=f"{SMOL}:latest", prompt="The sky is", options=greedy(8), stream=True))
    assert "".join(p.response or "" for p in parts) == whole.response and whole.response
    assert parts[-1].done and parts[-1].eval_count == whole.eval_count == 8
    assert whole.model == f"{SMOL}:latest"
    # the same prompt as a chat turn: generate renders the chat template as Ollama does
    chat = client.chat(model=SMOL, messages=[{"role": "user", "content": "The sky is"}], options=greedy(8), stream=False)
    assert chat.message.content == whole.response and chat.prompt_eval_count == whole.prompt_eval_count


def test_raw_generate_takes_the_prompt_as_it_is(client: ollama.Client, srv: Server) -> None:
    text = "<|im_start|>user\nThe sky is<|im_end|>\n<|im_start|>assistant\n"
    raw = client.generate(model=SMOL, prompt=text, raw=True, options=greedy(8), stream=False)
    templated = client.generate(model=SMOL, prompt="The sky is", system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                                options=greedy(8), stream=False)
    system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    tokens = httpx.post(f"{srv.url}/tokenize", json={"prompt": system + text}).json()["count"]
    assert templated.prompt_eval_count == tokens
    assert raw.prompt_eval_count == httpx.post(f"{srv.url}/tokenize", json={"prompt": text}).json()["count"]
    assert raw.response and raw.done_reason == "length"


def test_format_schema_is_enforced(client: ollama.Client) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
    msgs = [{"role": "user", "content": "Tom is 22. Reply in JSON."}]
    out = client.chat(model=SMOL, messages=msgs, format=schema, options={"temperature": 0, "num_predict": 64}, stream=False)
    jsonschema.validate(json.loads(out.message.content), schema)
    yes_no = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"], "additionalProperties": False}
    gen = client.generate(model=SMOL, prompt="Is the sky blue?", format=yes_no, options={"temperature": 0, "num_predict": 64}, stream=False)
    jsonschema.validate(json.loads(gen.response), yes_no)
    # "json": any object; the model is told nothing, the grammar alone makes it one (a cut one, when num_predict ends it)
    free = client.generate(model=SMOL, prompt="Hello", format="json", options={"temperature": 0, "num_predict": 24}, stream=False)
    assert free.response.lstrip().startswith("{")
    if free.done_reason == "stop":
        assert isinstance(json.loads(free.response), dict)


def test_tool_call_and_its_result_round_trip(qwen: Server, upstream: CannedUpstream) -> None:
    client = ollama.Client(host=qwen.url, timeout=60)
    upstream.text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    for stream in (False, True):
        if stream:
            calls = [c for part in client.chat(model="qwen-raw", messages=ask, tools=[WEATHER], stream=True) for c in part.message.tool_calls or []]
        else:
            calls = list(client.chat(model="qwen-raw", messages=ask, tools=[WEATHER], stream=False).message.tool_calls or [])
        assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert '"name": "get_weather"' in upstream.prompts[-1]  # the tool went into the prompt
    upstream.text = "It is sunny in Paris."
    history = [*ask, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
               {"role": "tool", "content": "sunny, 24 C", "tool_name": "get_weather"}]
    answer = client.chat(model="qwen-raw", messages=history, tools=[WEATHER], stream=False)
    assert answer.message.content == "It is sunny in Paris." and not answer.message.tool_calls
    prompt = upstream.prompts[-1]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>tool\nsunny, 24 C<|im_end|>" in prompt


def test_think_splits_the_reasoning_out(qwen: Server, upstream: CannedUpstream, client: ollama.Client) -> None:
    q = ollama.Client(host=qwen.url, timeout=60)
    upstream.text = "<think>The user asks about Paris.</think>It is sunny."
    for stream in (False, True):
        parts = list(q.chat(model="qwen-raw", messages=ASK, think=True, stream=True)) if stream else [q.chat(model="qwen-raw", messages=ASK, think=True)]
        assert "".join(p.message.thinking or "" for p in parts) == "The user asks about Paris."
        assert "".join(p.message.content or "" for p in parts) == "It is sunny."
    gen = q.generate(model="qwen-raw", prompt="Weather?", think="high", stream=False)
    assert (gen.thinking, gen.response) == ("The user asks about Paris.", "It is sunny.")
    upstream.text = "It is sunny."
    off = q.chat(model="qwen-raw", messages=ASK, think=False)
    assert off.message.content == "It is sunny." and not off.message.thinking
    assert upstream.prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # the template's switch, off
    shown = q.show("qwen-raw")
    assert "thinking" in (shown.capabilities or []) and "thinking" not in (client.show(SMOL).capabilities or [])
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model=SMOL, messages=ASK, think=True)
    assert err.value.status_code == 400 and "does not support thinking" in err.value.error


def test_embed_as_v1_embeddings(client: ollama.Client, srv: Server) -> None:
    texts = ["The cat sits on the mat.", "A dog runs in the park."]
    out = client.embed(model=f"{MINILM}:latest", input=texts)
    vectors = np.array(out.embeddings)
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    ref = httpx.post(f"{srv.url}/v1/embeddings", json={"model": MINILM, "input": texts}).json()
    assert np.allclose(vectors, [d["embedding"] for d in ref["data"]], atol=1e-4)
    assert out.prompt_eval_count == ref["usage"]["prompt_tokens"]
    old = client.embeddings(model=MINILM, prompt=texts[0])
    assert np.allclose(old.embedding, vectors[0], atol=1e-4)
    long = "word " * 2000  # over MiniLM's 512: cut to it by default, a 400 when truncate is false
    assert len(client.embed(model=MINILM, input=long).embeddings[0]) == 384
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model=MINILM, input=long, truncate=False)
    assert err.value.status_code == 400 and "context length" in err.value.error


def test_list_show_ps(client: ollama.Client) -> None:
    listed = {m.model: m for m in client.list().models}
    assert set(listed) >= {f"{SMOL}:latest", f"{MINILM}:latest"}
    smol = listed[f"{SMOL}:latest"]
    assert smol.details.format == "gguf" and smol.details.family == "llama" and smol.details.quantization_level == "Q4_1"
    assert smol.size > 0 and len(smol.digest) == 64
    shown = client.show(SMOL)
    assert shown.capabilities == ["completion", "tools"] and "<|im_start|>" in shown.template
    assert shown.modelinfo["llama.context_length"] == 2048  # the context served, what clients size prompts by
    assert client.show(MINILM).capabilities == ["embedding"]
    client.chat(model=SMOL, messages=ASK, options=greedy(1))
    running = {m.model: m for m in client.ps().models}
    assert running[f"{SMOL}:latest"].context_length == 2048 and f"{MINILM}:latest" in running


def test_keep_alive_zero_unloads_and_the_next_request_loads(client: ollama.Client) -> None:
    unloaded = client.generate(model=SMOL, prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert f"{SMOL}:latest" not in {m.model for m in client.ps().models}
    again = client.chat(model=SMOL, messages=ASK, options=greedy(3))
    assert again.message.content and again.load_duration > 0
    assert f"{SMOL}:latest" in {m.model for m in client.ps().models}
    assert client.chat(model=SMOL, messages=[]).done_reason == "load"


def test_num_ctx_over_the_loaded_context_is_a_clear_error(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model=SMOL, messages=ASK, options={"num_ctx": 8192})
    assert err.value.status_code == 400 and "--ctx-size 8192" in err.value.error
    small = client.chat(model=SMOL, messages=ASK, options={"num_ctx": 64, "temperature": 0})
    assert small.prompt_eval_count + small.eval_count <= 64 and small.done_reason == "length"


def png(size: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), (200, 30, 30)).save(buf, "PNG")
    return buf.getvalue()


def test_images_on_the_vision_model() -> None:
    from tests.vision.make_tiny_vlm import build

    model, mmproj = build()
    s = Server(["--model", str(model), "--mmproj", str(mmproj), "--ctx-size", "2048", "--threads", "1"])
    try:
        client = ollama.Client(host=s.url, timeout=300)
        name = Path(model).stem
        text = client.chat(model=name, messages=[{"role": "user", "content": "Describe it."}], options=greedy(4))
        one = client.chat(model=name, messages=[{"role": "user", "content": "Describe it.", "images": [png(84)]}], options=greedy(4))
        two = client.chat(model=name, messages=[{"role": "user", "content": "Describe it.", "images": [png(84), png(168)]}], options=greedy(4))
        # Qwen2-VL: a token per 28x28 pixels, between <|vision_start|> and <|vision_end|>
        assert one.prompt_eval_count - text.prompt_eval_count == 3 * 3 + 2
        assert two.prompt_eval_count - one.prompt_eval_count == 6 * 6 + 2
        gen = client.generate(model=name, prompt="Describe it.", images=[base64.b64encode(png(84)).decode()], options=greedy(4))
        assert gen.prompt_eval_count == one.prompt_eval_count and "vision" in (client.show(name).capabilities or [])
    finally:
        s.stop()


# -- raw HTTP: error shapes and framing -------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "body", "status", "says"),
    [
        ("POST", "/api/chat", {"model": "llama3.2", "messages": ASK}, 404, "model 'llama3.2' not found"),
        ("POST", "/api/chat", {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        ("POST", "/api/chat", {"messages": ASK, "keep_alive": "soon"}, 400, "keep_alive"),
        ("POST", "/api/chat", {"messages": ASK, "format": "yaml"}, 400, "format"),
        ("POST", "/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, 400, "template"),
        ("POST", "/api/generate", {"prompt": "x", "context": [1, 2]}, 400, "context"),
        ("POST", "/api/generate", {"prompt": "x", "suffix": "y"}, 400, "fill-in-the-middle"),
        ("POST", "/api/generate", {"prompt": "x", "raw": True, "system": "s"}, 400, "raw"),
        ("POST", "/api/generate", {"prompt": "x", "raw": True, "suffix": "y"}, 400, "fill-in-the-middle"),
        ("GET", "/api/chat", None, 405, "Method Not Allowed"),
        ("POST", "/api/pull", {"model": "llama3.2"}, 400, "does not manage models"),
        ("POST", "/api/create", {"model": "m", "from": "llama3.2"}, 400, "does not manage models"),
        ("DELETE", "/api/delete", {"model": "llama3.2"}, 400, "does not manage models"),
        ("POST", "/api/show", {"model": "nope"}, 404, "not found"),
        ("POST", "/api/embed", {"model": SMOL, "input": "x"}, 400, "--embeddings"),
    ],
)
def test_errors_in_ollamas_shape(srv: Server, method: str, path: str, body: Any, status: int, says: str) -> None:
    r = httpx.request(method, f"{srv.url}{path}", content=json.dumps(body) if body is not None else None, timeout=60)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and says in r.json()["error"]


def test_nan_and_lone_surrogates_are_400s(srv: Server) -> None:
    for raw in ('{"messages": [{"role": "user", "content": "hi"}], "options": {"temperature": NaN}}',
                '{"messages": [{"role": "user", "content": "\\ud800"}]}'):
        r = httpx.post(f"{srv.url}/api/chat", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and set(r.json()) == {"error"}


def test_ndjson_framing_and_json_whatever_the_content_type(srv: Server) -> None:
    body = json.dumps({"model": SMOL, "messages": ASK, "options": greedy(5)})  # no "stream": Ollama streams by default
    # curl -d sends form data's Content-Type; Ollama (and so toolserve) reads the JSON anyway
    with httpx.stream("POST", f"{srv.url}/api/chat", content=body, headers={"content-type": "application/x-www-form-urlencoded"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        text = r.read().decode()
    assert text.endswith("\n") and "\n\n" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["done"] for line in lines] == [False] * 5 + [True]
    assert httpx.get(f"{srv.url}/api/version").json()["version"].count(".") == 2
