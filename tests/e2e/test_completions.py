"""Legacy completions against a real server."""

from __future__ import annotations

PROMPT = "The three primary colours are"


def test_completion(client, model_id: str) -> None:
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12


def test_default_max_tokens_is_16(client, model_id: str) -> None:
    r = client.completions.create(model=model_id, prompt="Count: one, two, three, four,", temperature=0)
    assert r.usage.completion_tokens <= 16


def test_stream_equals_non_stream(client, model_id: str) -> None:
    kw = {"model": model_id, "prompt": PROMPT, "max_tokens": 30, "temperature": 0.8, "seed": 11}
    full = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_list_of_prompts(client, model_id: str) -> None:
    r = client.completions.create(model=model_id, prompt=[PROMPT, "Once upon a time"], max_tokens=5, temperature=0)
    assert sorted(c.index for c in r.choices) == [0, 1]
    single = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=5, temperature=0)
    assert r.choices[1].text == single.choices[0].text


def test_token_prompt_and_echo(client, model_id: str, http) -> None:  # type: ignore[no-untyped-def]
    tokens = http.post("/tokenize", json={"prompt": PROMPT, "add_special_tokens": False}).json()["tokens"]
    a = client.completions.create(model=model_id, prompt=tokens, max_tokens=5, temperature=0)
    b = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=5, temperature=0, echo=True)
    assert b.choices[0].text == PROMPT + a.choices[0].text


def test_logprobs(client, model_id: str) -> None:
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert lp.text_offset == sorted(lp.text_offset)


def test_stop(client, model_id: str) -> None:
    full = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=20, temperature=0).choices[0].text
    stop = full.strip()[:3]
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=20, temperature=0, stop=stop)
    assert r.choices[0].text == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
