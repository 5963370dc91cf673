"""Fill-in-the-middle end to end on a tiny random Qwen2 coder with Qwen2.5-Coder's FIM tokens
(tests/textmodels/make_tiny_text.py): the exact prompt of /infill (llama-server's), of `suffix` on
/v1/completions and on /api/generate, with and without repository context; the same prompt
given raw answers the same; the 400 on SmolLM2, which has no FIM tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import pytest
from openai import OpenAI

from tests.conftest import Server

PREFIX, TYPED, SUFFIX = "def add(a, b):\n", "    c =", "\n    return c\n"
FILE_LEVEL = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"


@pytest.fixture(scope="module")
def coder() -> Iterator[Server]:
    from tests.textmodels.make_tiny_text import build

    s = Server(["--model", str(build("coder")), "--ctx-size", "1024", "--parallel", "1"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(coder: Server) -> str:
    return str(httpx.get(f"{coder.url}/v1/models").json()["data"][0]["id"])


def infill(srv: Server, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{srv.url}/infill", json={"n_predict": 8, "temperature": 0, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def count(srv: Server, text: str) -> int:
    return int(httpx.post(f"{srv.url}/tokenize", json={"prompt": text}).json()["count"])


def completion(srv: Server, model: str, prompt: str, **extra: Any) -> Any:
    client = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
    return client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, **extra)


def test_models_say_they_insert(coder: Server, model: str) -> None:
    assert "insert" in (ollama.Client(host=coder.url).show(model).capabilities or [])


def test_infill_prompt_without_repository_context(coder: Server) -> None:
    out = infill(coder, input_prefix=PREFIX, input_suffix=SUFFIX, prompt=TYPED)
    expected = f"<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>{PREFIX}{TYPED}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    assert out["prompt"] == expected
    assert out["tokens_evaluated"] == count(coder, expected)
    assert out["stop"] is True and out["tokens_predicted"] == 8 and out["stop_type"] == "limit" and not out["truncated"]


def test_infill_prompt_with_repository_context(coder: Server) -> None:
    extra = [{"filename": "util.py", "text": "import os\n"}, {"text": "x = 1\n"}]  # a chunk without a name is "tmp"
    out = infill(coder, input_prefix=PREFIX, input_suffix=SUFFIX, input_extra=extra)
    expected = ("<|repo_name|>myproject\n<|file_sep|>util.py\nimport os\n<|file_sep|>tmp\nx = 1\n<|file_sep|>filename\n"
                f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")
    assert out["prompt"] == expected and out["tokens_evaluated"] == count(coder, expected)


def test_infill_trims_what_does_not_fit_as_llama_server(coder: Server) -> None:
    long = "".join(f"line_{i} = {i}\n" for i in range(400))  # far more than 3/4 of the 512-token batch of a 1024 context
    out = infill(coder, input_prefix=long, input_suffix=SUFFIX)
    assert out["truncated"] is True and out["tokens_evaluated"] <= 1024
    kept = out["prompt"].split("<|fim_prefix|>")[1].split("<|fim_suffix|>")[0]
    assert long.endswith(kept) and len(kept) < len(long)  # the end next to the cursor stays


def test_infill_stream_equals_whole(coder: Server) -> None:
    whole = infill(coder, input_prefix=PREFIX, input_suffix=SUFFIX)
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{coder.url}/infill", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert all("[DONE]" not in json.dumps(e) for e in events)  # llama-server's /infill stream has no [DONE]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["tokens_predicted"] == whole["tokens_predicted"]


def test_suffix_on_completions_is_the_file_level_prompt(coder: Server, model: str) -> None:
    fim = completion(coder, model, PREFIX, suffix=SUFFIX)
    raw = completion(coder, model, FILE_LEVEL)  # the same prompt, given whole: the same tokens, the same answer
    assert fim.usage.prompt_tokens == raw.usage.prompt_tokens == count(coder, FILE_LEVEL)
    assert fim.choices[0].text == raw.choices[0].text
    with pytest.raises(Exception, match="echo"):
        completion(coder, model, PREFIX, suffix=SUFFIX, echo=True)


def test_suffix_on_ollama_generate(coder: Server, model: str) -> None:
    client = ollama.Client(host=coder.url, timeout=120)
    opts = {"temperature": 0, "num_predict": 8}
    fim = client.generate(model=model, prompt=PREFIX, suffix=SUFFIX, options=opts, stream=False)
    raw = client.generate(model=model, prompt=FILE_LEVEL, raw=True, options=opts, stream=False)
    assert fim.prompt_eval_count == raw.prompt_eval_count == count(coder, FILE_LEVEL)
    assert fim.response == raw.response == completion(coder, model, PREFIX, suffix=SUFFIX).choices[0].text
    streamed = "".join(p.response or "" for p in client.generate(model=model, prompt=PREFIX, suffix=SUFFIX, options=opts, stream=True))
    assert streamed == fim.response
    # raw with a suffix is fill-in-the-middle too (no chat template either way)
    assert client.generate(model=model, prompt=PREFIX, suffix=SUFFIX, raw=True, options=opts, stream=False).response == fim.response
    # Continue reads ".Suffix" in the template to know a model fills in the middle
    assert "{{ if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>" in (client.show(model).template or "")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/infill", {"input_prefix": "a", "input_suffix": "b"}),
        ("/v1/completions", {"prompt": "a", "suffix": "b", "max_tokens": 2}),
        ("/api/generate", {"prompt": "a", "suffix": "b"}),
    ],
)
def test_a_model_without_fim_tokens_says_so(server: Server, path: str, body: dict[str, Any]) -> None:
    r = httpx.post(f"{server.url}{path}", json=body, timeout=60)
    assert r.status_code == 400
    message = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
    assert "cannot fill in the middle" in message and "fim_pre" in message
