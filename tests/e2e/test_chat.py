"""Chat completions against a real server, through the official openai client."""

from __future__ import annotations

import math

import httpx
import pytest

Q = [{"role": "user", "content": "Name three colours of the rainbow."}]


def stream_text(client, model_id: str, **kw):  # type: ignore[no-untyped-def]
    chunks = list(client.chat.completions.create(model=model_id, stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


def test_chat_answers(client, model_id: str) -> None:
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model_id
    assert r.system_fingerprint
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10
    assert 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 7}, {"temperature": 1.2, "top_p": 0.9, "seed": 3, "extra_body": {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1}}])
def test_stream_equals_non_stream(client, model_id: str, sampling: dict) -> None:
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=40, **sampling)
    text, finish, chunks = stream_text(client, model_id, messages=Q, max_tokens=40, **sampling)
    assert text == r.choices[0].message.content
    assert finish == [r.choices[0].finish_reason]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1


def test_same_seed_same_output(client, model_id: str) -> None:
    kw = {"messages": Q, "max_tokens": 30, "temperature": 1.0, "seed": 1234}
    a = client.chat.completions.create(model=model_id, **kw).choices[0].message.content
    b = client.chat.completions.create(model=model_id, **kw).choices[0].message.content
    assert a == b


def test_length_finish(client, model_id: str) -> None:
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    text, finish, _ = stream_text(client, model_id, messages=Q, max_completion_tokens=3, temperature=0)
    assert finish == ["length"]
    assert text == r.choices[0].message.content


def test_stop_spanning_two_tokens(client, model_id: str, http: httpx.Client) -> None:
    full = client.chat.completions.create(model=model_id, messages=Q, max_tokens=40, temperature=0).choices[0].message.content
    tokens = http.post("/tokenize", json={"prompt": full, "add_special_tokens": False}).json()["tokens"]
    pieces = [http.post("/detokenize", json={"tokens": [t]}).json()["prompt"] for t in tokens]
    # a stop string made of the end of one token and the start of the next
    k = next(i for i in range(2, len(pieces) - 1) if len(pieces[i]) >= 2 and len(pieces[i + 1]) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    expected = full[: full.index(stop)]
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=40, temperature=0, stop=[stop])
    assert r.choices[0].message.content == expected
    assert r.choices[0].finish_reason == "stop"
    text, finish, _ = stream_text(client, model_id, messages=Q, max_tokens=40, temperature=0, stop=stop)
    assert text == expected
    assert stop not in text
    assert finish == ["stop"]


def test_include_usage(client, model_id: str) -> None:
    _, _, chunks = stream_text(client, model_id, messages=Q, max_tokens=8, temperature=0, stream_options={"include_usage": True})
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])


def test_logprobs(client, model_id: str) -> None:
    greedy = {"repetition_penalty": 1.0, "dry_multiplier": 0.0}  # as the model ranks them: no loop-ending defaults
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=10, temperature=0, logprobs=True, top_logprobs=3, extra_body=greedy)
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    assert "".join(e.token for e in entries) == r.choices[0].message.content
    for e in entries:
        assert e.logprob <= 0
        tops = e.top_logprobs
        assert len(tops) == 3
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        assert tops[0].token == e.token  # greedy picks the most likely token
        assert math.isclose(tops[0].logprob, e.logprob, abs_tol=1e-4)
    _, _, chunks = stream_text(client, model_id, messages=Q, max_tokens=10, temperature=0, logprobs=True, top_logprobs=3, extra_body=greedy)
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in entries]


def test_n_choices(client, model_id: str) -> None:
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=12, temperature=1.0, seed=5, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    _, _, chunks = stream_text(client, model_id, messages=Q, max_tokens=12, temperature=1.0, seed=5, n=2)
    by_index: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            by_index[ch.index] = by_index.get(ch.index, "") + (ch.delta.content or "")
    assert by_index == {c.index: c.message.content for c in r.choices}


def test_content_parts_and_system(client, model_id: str) -> None:
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": [{"type": "text", "text": "Name three colours"}, {"type": "text", "text": "of the rainbow."}]},
    ]
    r = client.chat.completions.create(model=model_id, messages=messages, max_tokens=8, temperature=0)
    assert r.choices[0].message.content


def test_multi_turn(client, model_id: str) -> None:
    messages = [*Q, {"role": "assistant", "content": "Red, green and blue."}, {"role": "user", "content": "One more?"}]
    r = client.chat.completions.create(model=model_id, messages=messages, max_tokens=8, temperature=0)
    assert r.usage.prompt_tokens > 20


def test_logit_bias_forbids_a_token(client, model_id: str, http: httpx.Client) -> None:
    r = client.chat.completions.create(model=model_id, messages=Q, max_tokens=5, temperature=0, logprobs=True)
    first = r.choices[0].logprobs.content[0].token
    token_id = http.post("/tokenize", json={"prompt": first, "add_special_tokens": False}).json()["tokens"][0]
    r2 = client.chat.completions.create(model=model_id, messages=Q, max_tokens=5, temperature=0, logprobs=True, logit_bias={str(token_id): -100})
    assert r2.choices[0].logprobs.content[0].token != first


def test_models_and_health(client, model_id: str, http: httpx.Client) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [model_id]
    assert model_id == "SmolLM2-135M-Instruct.Q4_1"
    card = http.get("/v1/models").json()["data"][0]["toolserve"]
    assert card["tool_format"] == "hermes"  # plain ChatML template: Hermes style
    assert card["chat_template"] == "gguf"
    assert card["template_renders_tools"] is False
    assert http.get("/health").json()["status"] == "ok"
    assert client.models.retrieve(model_id).id == model_id


def test_tokenize_round_trip(http: httpx.Client) -> None:
    text = "Grüße, 世界! <|im_start|>"
    tokens = http.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]
    assert http.post("/detokenize", json={"tokens": tokens}).json()["prompt"] == text


def test_tokenize_renders_tools_as_a_request_does(http: httpx.Client) -> None:
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    bare = http.post("/tokenize", json={"messages": msgs}).json()["count"]
    with_tools = http.post("/tokenize", json={"messages": msgs, "tools": [tool]}).json()["count"]
    asked = http.post("/v1/chat/completions", json={"messages": msgs, "tools": [tool], "max_tokens": 1}).json()
    assert bare < with_tools == asked["usage"]["prompt_tokens"]
    none = http.post("/tokenize", json={"messages": msgs, "tools": [tool], "tool_choice": "none"}).json()["count"]
    assert none == http.post("/v1/chat/completions", json={"messages": msgs, "tools": [tool], "tool_choice": "none", "max_tokens": 1}).json()["usage"]["prompt_tokens"]
