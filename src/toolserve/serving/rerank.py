"""Reranking: how well each document answers a query, scored by a reranker GGUF (BGE rerankers,
Qwen3-Reranker, jina-reranker: llama.cpp's rank pooling, the classifier head's output) loaded
with `--rerank-model PATH`. Pairs are framed as llama-server frames them (format_prompt_rerank):
the model's own "rerank" prompt template where its GGUF has one, else
[BOS] query [EOS] [SEP] document [EOS] with the tokens the vocabulary adds. Scoring shares the
embedding worker (engine/embed.py): its batching, admission and cancellation.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from toolserve.engine.embed import Embedder
from toolserve.errors import InvalidRequest, ModelLoadError
from toolserve.models.files import gguf_tensor_bytes
from toolserve.serving.embeddings import side_card

MAX_DOCUMENTS = 1000  # Cohere's limit on documents per request
MAX_TOKENS = 300_000  # all the pairs of a request together, as for embeddings
SOFTMAX_HEADS = ("qwen3", "qwen3vl")  # llama.cpp ends these rerankers' heads with a softmax: scores are probabilities
HEAD_TENSORS = ("cls.output.weight", "cls.weight")  # a classification head: what makes a GGUF a reranker
_PLACEHOLDER = re.compile(r"\{query\}|\{document\}")


@dataclass(eq=False)
class RerankModel:
    """A reranker served for /v1/rerank only (`--rerank-model`)."""

    id: str
    embedder: Embedder
    created: int = field(default_factory=lambda: int(time.time()))

    def card(self) -> dict[str, object]:
        e = self.embedder
        facts = {"path": e.path, "n_ctx": e.n_ctx, "architecture": e.architecture, "prompt_template": e.rerank_template is not None}
        return side_card(self.id, self.created, e, "rerank", facts)


def check_reranker(path: str) -> None:
    """A reranker GGUF has a classification head; a chat or embedding model would give noise."""
    tensors = gguf_tensor_bytes(path)
    if not any(t in tensors for t in HEAD_TENSORS):
        raise ModelLoadError(
            f"--rerank-model {path}: no classification head (cls.output) in this GGUF, so it is not a reranker; "
            "give a reranker converted by llama.cpp (bge-reranker, Qwen3-Reranker, jina-reranker)"
        )


def pair_tokens(
    template: str | None, special: dict[str, int | None], tokenize: Callable[[str, bool], list[int]], query: str, doc: str
) -> list[int]:
    """The tokens of one (query, document) pair. `tokenize(text, special)`: without BOS, parsing
    special tokens or not. A template is filled in one pass (a query holding "{document}" stays
    as it is) and read whole with its special tokens, as llama-server reads it, so the tokens at
    the seams are the ones the model was trained on; the plain frame reads query and document
    as text."""
    if template is not None:
        filled = _PLACEHOLDER.sub(lambda m: query if m.group() == "{query}" else doc, template)
        return tokenize(filled, True)
    bos, eos, sep = special["bos"], special["eos"], special["sep"]
    return [
        *([bos] if bos is not None else []), *tokenize(query, False), *([eos] if eos is not None else []),
        *([sep] if sep is not None else []), *tokenize(doc, False), *([eos] if eos is not None else []),
    ]  # fmt: skip


def pairs(e: Embedder, query: str, documents: Sequence[str]) -> list[list[int]]:
    """Every document's pair with the query, each checked against the model's limit (a 400
    naming the document, never a silent cut)."""
    if len(documents) > MAX_DOCUMENTS:
        raise InvalidRequest(f"'documents' holds {len(documents)} items; at most {MAX_DOCUMENTS} are accepted in one request.", param="documents")

    def tokenize(text: str, special: bool) -> list[int]:
        return e.vocab.tokenize(text, add_bos=False, special=special) if text else []

    frame = e.special_tokens()
    out = []
    for i, doc in enumerate(documents):
        tokens = pair_tokens(e.rerank_template, frame, tokenize, query, doc)
        if len(tokens) > e.n_ctx:
            raise InvalidRequest(
                f"documents[{i}] with the query is {len(tokens)} tokens, over this model's limit of {e.n_ctx}; "
                "send shorter documents (or a shorter query).",
                param=f"documents[{i}]",
            )
        out.append(tokens)
    total = sum(len(t) for t in out)
    if total > MAX_TOKENS:
        raise InvalidRequest(f"the pairs of query and documents hold {total} tokens in all; at most {MAX_TOKENS} are accepted in one request.", param="documents")
    return out


def relevance(architecture: str, row: Sequence[float]) -> float:
    """A pair's relevance in [0, 1] from the head's output: Qwen3's softmax already gives the
    probability of "yes"; a one-logit head (BGE, jina) goes through a sigmoid, as Cohere, Jina
    and TEI report scores."""
    first = float(row[0])
    if architecture in SOFTMAX_HEADS:
        return first
    return 1.0 / (1.0 + math.exp(-first)) if first >= 0 else math.exp(first) / (1.0 + math.exp(first))
