"""Rerank end to end on a tiny random Qwen3 reranker converted by llama.cpp's converter
(tests/textmodels/make_tiny_text.py: rank pooling, a yes/no head, the GGUF's rerank template),
and a tiny BERT cross-encoder (a one-logit head, pairs framed by its vocabulary's tokens):
shapes, order by score, top_n, return_documents, the pairs' token counts against llama.cpp's own
tokenizer, scores that do not depend on the batch, and the errors. Its scores are noise; the
order is whatever they say, and checked against them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Server

DOCS = ["Paris is the capital of France.", "The cat sits on the mat.", "yes", "def add(a, b): return a + b", ""]
QUERY = "What is the capital of France?"


@pytest.fixture(scope="module")
def path() -> str:
    from tests.textmodels.make_tiny_text import build

    return str(build("reranker"))


@pytest.fixture(scope="module")
def srv(path: str) -> Iterator[Server]:
    s = Server(["--ctx-size", "512", "--rerank-model", path])
    yield s
    s.stop()


def rerank(srv: Server, route: str = "/v1/rerank", **body: Any) -> httpx.Response:
    return httpx.post(f"{srv.url}{route}", json={"query": QUERY, "documents": DOCS, **body}, timeout=120)


def expected_tokens(path: str, query: str, doc: str) -> int:
    """The pair's tokens as llama-server makes them: the GGUF's rerank template filled in and
    read whole, special tokens parsed (llama.cpp's tokenizer, through llama-cpp-python)."""
    import gguf
    from llama_cpp import Llama

    template = str(gguf.GGUFReader(path).fields["tokenizer.chat_template.rerank"].contents())
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    filled = template.replace("{query}", query).replace("{document}", doc)
    return len(vocab.tokenize(filled.encode(), add_bos=False, special=True))


def test_results_sorted_by_score_with_usage(srv: Server, path: str) -> None:
    r = rerank(srv)
    assert r.status_code == 200, r.text
    body = r.json()
    results = body["results"]
    assert sorted(x["index"] for x in results) == list(range(len(DOCS)))
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert all(x["document"] == {"text": DOCS[x["index"]]} for x in results)  # return_documents: Jina's default
    assert body["model"] == "tiny-qwen3-reranker-f16" and body["object"] == "list"
    assert body["usage"]["prompt_tokens"] == sum(expected_tokens(path, QUERY, d) for d in DOCS)


def test_scores_do_not_depend_on_the_batch(srv: Server) -> None:
    together = {x["index"]: x["relevance_score"] for x in rerank(srv).json()["results"]}
    for i, doc in enumerate(DOCS):
        alone = rerank(srv, documents=[doc]).json()["results"][0]
        assert alone["index"] == 0 and alone["relevance_score"] == pytest.approx(together[i], abs=1e-4)


def test_top_n_return_documents_and_the_other_routes(srv: Server) -> None:
    full = rerank(srv).json()["results"]
    top = rerank(srv, top_n=2, return_documents=False, documents=[{"text": d} for d in DOCS]).json()["results"]
    assert [x["index"] for x in top] == [x["index"] for x in full[:2]] and all("document" not in x for x in top)
    assert rerank(srv, top_n=99).json()["results"] == full
    for route in ("/rerank", "/v2/rerank"):
        assert rerank(srv, route).json()["results"] == full


def test_listed_as_a_reranker(srv: Server) -> None:
    cards = {m["id"]: m for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}
    assert cards["tiny-qwen3-reranker-f16"]["toolserve"]["kind"] == "rerank"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"documents": []}, 400, "documents"),
        ({"documents": ["word " * 600]}, 400, "documents[0] with the query is"),
        ({"model": "SmolLM2-135M-Instruct.Q4_1"}, 400, "--rerank-model PATH"),
        ({"model": "nope"}, 404, "does not exist"),
        ({"documents": [{"txt": "a"}]}, 400, "documents[0]"),
        ({"top_n": 0}, 400, "top_n"),
    ],
)
def test_errors(srv: Server, body: dict[str, Any], status: int, says: str) -> None:
    r = rerank(srv, **body)
    assert r.status_code == status and says in r.json()["error"]["message"], r.text


def test_a_bert_cross_encoder_frames_pairs_with_its_own_tokens() -> None:
    from llama_cpp import Llama

    from tests.textmodels.make_tiny_text import build

    path = str(build("bert-reranker"))
    s = Server(["--ctx-size", "512", "--rerank-model", path])
    try:
        body = rerank(s).json()
        results = body["results"]
        scores = [x["relevance_score"] for x in results]
        assert scores == sorted(scores, reverse=True) and all(0.0 < x < 1.0 for x in scores)  # a logit through a sigmoid
        assert sorted(x["index"] for x in results) == list(range(len(DOCS)))
        vocab = Llama(model_path=path, vocab_only=True, verbose=False)
        framed_query = len(vocab.tokenize(QUERY.encode(), add_bos=True, special=False))  # [CLS] query [SEP]
        # this vocabulary adds BOS and SEP, no EOS: llama-server frames a pair [CLS] query [SEP] document
        expected = sum(framed_query + len(vocab.tokenize(d.encode(), add_bos=False, special=False)) for d in DOCS)
        assert body["usage"]["prompt_tokens"] == expected
        alone = rerank(s, documents=[DOCS[0]]).json()["results"][0]["relevance_score"]
        assert alone == pytest.approx(next(x["relevance_score"] for x in results if x["index"] == 0), abs=1e-4)
    finally:
        s.stop()


def test_a_chat_model_alone_says_how_to_start_a_reranker(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/rerank", json={"query": "q", "documents": ["d"]}, timeout=60)
    assert r.status_code == 400 and "--rerank-model PATH" in r.json()["error"]["message"]


def test_a_gguf_without_a_classifier_head_is_refused_at_start(tmp_path: Any) -> None:
    from tests.embeddings.make_minilm import build

    with pytest.raises(RuntimeError, match="no classification head"):
        Server(["--ctx-size", "512", "--rerank-model", str(build())])
