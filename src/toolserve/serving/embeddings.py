"""What POST /v1/embeddings asks of a model: inputs checked and tokenized, vectors pooled by the
engine, normalised and cut to `dimensions`; which model embeds what."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolserve.engine.embed import Embedder, l2_normalise
from toolserve.errors import InvalidRequest, Overloaded, RequestTimeout
from toolserve.serving.pipeline import Limits

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
MAX_TOKENS = 300_000  # OpenAI's limit on the tokens of all of a request's inputs together


@dataclass(eq=False)
class EmbeddingModel:
    """A model served for embeddings only (`--embedding-model`): no chat, no completions."""

    id: str
    embedder: Embedder
    created: int = field(default_factory=lambda: int(time.time()))

    def card(self) -> dict[str, object]:
        return side_card(self.id, self.created, self.embedder, "embedding", describe(self.embedder))


def side_card(model_id: str, created: int, e: Embedder, kind: str, facts: dict[str, object]) -> dict[str, object]:
    """The /v1/models card of a model served beside the chat models (embeddings, rerank)."""
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "toolserve",
        "max_model_len": e.n_ctx,
        "toolserve": {"backend": "local", "kind": kind, **facts},
    }


def describe(e: Embedder) -> dict[str, object]:
    """The facts about an embedder that /v1/models shows."""
    return {"path": e.path, "embedding_dimensions": e.dimensions, "pooling": e.pooling, "n_ctx": e.n_ctx}


def token_lists(
    e: Embedder, data: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]], *, truncate: bool = False
) -> list[list[int]]:
    """The request's `input` as one token list per input, each checked: not empty, ids in the
    vocabulary, no longer than the model takes (OpenAI's 400, never a silent cut; `truncate`:
    a text is cut to the model's limit instead, as Ollama's /api/embed does by default)."""
    items: list[Any]
    if isinstance(data, str):
        items = [data]
    elif data and all(isinstance(x, int) for x in data):
        items = [list(data)]
    else:
        items = list(data)
    if not items:
        raise InvalidRequest("'input' is empty: give a string, a list of strings, or token ids.", param="input")
    if len(items) > MAX_INPUTS:
        raise InvalidRequest(f"'input' holds {len(items)} items; at most {MAX_INPUTS} are accepted in one request.", param="input")
    single = isinstance(data, str) or isinstance(data[0], int)  # one text, or one list of token ids
    out: list[list[int]] = []
    for i, item in enumerate(items):
        where = "input" if single else f"input[{i}]"
        if isinstance(item, str):
            if not item:
                raise InvalidRequest(f"'{where}' is an empty string; there is nothing to embed.", param=where)
            tokens = e.tokenize(item)
            if not tokens:  # a text the tokenizer drops entirely, in a model that adds no special tokens
                raise InvalidRequest(f"'{where}' gives no tokens for this model; there is nothing to embed.", param=where)
        else:
            tokens = list(item)
            if not tokens:
                raise InvalidRequest(f"'{where}' is an empty list of tokens; there is nothing to embed.", param=where)
            bad = next((t for t in tokens if not 0 <= t < e.n_vocab), None)
            if bad is not None:
                raise InvalidRequest(f"'{where}' holds token {bad}, outside the vocabulary (0..{e.n_vocab - 1}).", param=where)
        if len(tokens) > e.n_ctx and truncate and isinstance(item, str):
            tokens = cut(e, item, tokens)
        if len(tokens) > e.n_ctx:
            # OpenAI's words for an input over the limit (type invalid_request_error, param and code null)
            raise InvalidRequest(
                f"This model's maximum context length is {e.n_ctx} tokens, however you requested {len(tokens)} tokens "
                f"({len(tokens)} in your prompt; 0 for the completion). Please reduce your prompt; or completion length."
            )
        out.append(tokens)
    total = sum(len(t) for t in out)
    if total > MAX_TOKENS:
        raise InvalidRequest(f"'input' holds {total} tokens in all; at most {MAX_TOKENS} are accepted in one request.", param="input")
    return out


def cut(e: Embedder, text: str, tokens: list[int]) -> list[int]:
    """`text`'s tokens cut to the model's limit, its special tokens kept around the kept head:
    `tokens` is the model's specials (BOS/CLS, EOS/SEP) around the text's own tokens."""
    plain = e.vocab.tokenize(text, add_bos=False, special=False)
    extra = len(tokens) - len(plain)
    head = next((h for h in range(max(extra, 0) + 1) if tokens[h : h + len(plain)] == plain), None)
    if head is None or e.n_ctx <= extra:  # not specials around the text: keep the head, and the last token
        return [*tokens[: e.n_ctx - 1], tokens[-1]]
    return [*tokens[:head], *plain[: e.n_ctx - extra], *tokens[head + len(plain) :]]


def check_dimensions(e: Embedder, dimensions: int | None) -> None:
    """`dimensions` other than the model's own is refused: a GGUF does not say whether its
    model was trained to be cut (Matryoshka), and a cut vector of one that was not is poor."""
    if dimensions is not None and dimensions != e.dimensions:
        raise InvalidRequest(
            f"This model does not support specifying dimensions: its embeddings have {e.dimensions} dimensions "
            f"(send dimensions={e.dimensions} or leave it out).",
            param="dimensions",
        )


def admit(e: Embedder, limits: Limits) -> None:
    """Refuse a request when the embedder already has `max_queue` requests (a 429, as for
    generation): each one there shares its decodes with the others."""
    if e.requests >= limits.max_queue:
        raise Overloaded(
            f"The server is busy: {e.requests} embedding requests are in progress (limit {limits.max_queue}). Retry later.",
            retry_after=1,
        )


async def embed(e: Embedder, tokens: list[list[int]], limits: Limits, *, normalise: bool = True) -> np.ndarray:
    """One L2-normalised float32 vector per token list (`normalise` false: as pooled, a
    reranker's scores), batched by the engine, within the request's time (`--request-timeout`:
    504; its work stops)."""
    try:
        rows = await asyncio.wait_for(e.embed(tokens), limits.request_timeout)
        return l2_normalise(rows) if normalise else rows
    except (TimeoutError, asyncio.TimeoutError):  # the same class from Python 3.11 on
        raise RequestTimeout(f"The request took longer than the {limits.request_timeout:g} s limit.") from None
