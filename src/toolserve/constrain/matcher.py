"""Token constraints from grammars, with llguidance (chosen by measurement: docs/constrained-decoding.md).

`Constrainer` belongs to one model: it holds llguidance's view of the vocabulary and compiles
a request's grammar before anything is generated (errors become a 400), keeping the last 64
that compiled: an agent sends the same tools every turn. Each generation
then gets a fresh `GrammarConstraint` (a copy of the compiled matcher) from a `GrammarFactory`.
A factory sent to an engine process travels as its grammar text; there it is bound to that
process's own `Constrainer`, so the mask is computed next to the logits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import llguidance
import numpy as np

from toolserve.errors import InvalidRequest

log = logging.getLogger(__name__)


class GrammarConstraint:
    """Masks tokens with an llguidance matcher.

    Lazy mode (`trigger` set): the model writes freely until the trigger text appears in its
    output; from there on the grammar holds (the trigger's tail within the same token is fed
    to the grammar first).
    """

    def __init__(self, template: Any, tokenizer: Any, piece: Callable[[int], bytes], n_vocab: int, trigger: str = ""):
        self._template = template
        self._tokenizer = tokenizer
        self._piece = piece
        self._n_vocab = n_vocab
        self._trigger = trigger.encode("utf-8")
        self._tail = b""
        self._matcher: Any = None if trigger else template.deep_copy()
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)  # one bit per token, reused
        self.abandoned = False

    def forbidden(self) -> np.ndarray | None:
        if self._matcher is None:
            return None
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        # inverting the packed words first is the cheapest way to a forbidden-token mask
        return np.unpackbits((~self._bits).view(np.uint8), count=self._n_vocab, bitorder="little").view(np.bool_)

    def accept(self, token: int) -> None:
        if self.abandoned:
            return
        if self._matcher is not None:
            if not self._matcher.consume_token(token):
                self._abandon(f"token {token} rejected: {self._matcher.get_error()}")
            return
        self._tail += self._piece(token)
        at = self._tail.find(self._trigger)
        if at < 0:
            self._tail = self._tail[-len(self._trigger) :]
            return
        self._matcher = self._template.deep_copy()
        rest = self._tail[at + len(self._trigger) :]
        if rest and not self._matcher.consume_tokens(self._tokenizer.tokenize_bytes(rest)):
            self._abandon("text after the trigger does not fit the grammar")

    def done(self) -> bool:
        return self._matcher is not None and not self.abandoned and bool(self._matcher.is_stopped())

    def _abandon(self, why: str) -> None:
        # cannot happen while the mask is applied; logged, and the parser treats the text as text
        log.warning("grammar constraint abandoned: %s", why)
        self.abandoned = True
        self._matcher = None


class Constrainer:
    """Compiles grammars for one model's vocabulary."""

    def __init__(self, tokenizer_factory: Callable[[], Any], piece: Callable[[int], bytes], n_vocab: int):
        self._factory = tokenizer_factory
        self._tokenizer: Any = None
        self._piece = piece
        self._n_vocab = n_vocab
        self._compiled: dict[str, Any] = {}  # recent grammars that compiled (`recall`)
        self._lock = threading.Lock()  # requests are prepared on worker threads (serving/conversation.py)

    @property
    def tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:  # ~0.3 s for 49k tokens: built on first use, then kept
                self._tokenizer = self._factory()
            return self._tokenizer

    def compile(self, grammar: str, *, param: str) -> Any:
        """A checked matcher for `grammar`; a grammar or schema llguidance cannot take is a 400."""
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidRequest(
                f"cannot build a constraint from this {param}: {matcher.get_error()}", param=param, code="unsupported_schema"
            )
        return matcher

    def factory(self, grammar: str, *, param: str, trigger: str = "") -> GrammarFactory:
        return GrammarFactory(grammar, param, trigger, self)

    def constraint(self, template: Any, trigger: str) -> GrammarConstraint:
        return GrammarConstraint(template, self.tokenizer, self._piece, self._n_vocab, trigger)

    def recall(self, grammar: str, param: str) -> Any:
        """`compile`, remembering the last 64 grammars that compiled (an agent sends the same
        tool list every turn: compiling it took 3 ms of each request)."""
        with self._lock:
            template = self._compiled.pop(grammar, None)
        if template is None:
            template = self.compile(grammar, param=param)
        with self._lock:
            self._compiled[grammar] = template
            while len(self._compiled) > 64:
                del self._compiled[next(iter(self._compiled))]
        return template


class GrammarFactory:
    """A fresh `GrammarConstraint` per generation (`SamplingParams.constraint`). Pickled, it keeps
    only its grammar; `bind` gives it the engine process's Constrainer."""

    def __init__(self, grammar: str, param: str, trigger: str, constrainer: Constrainer | None):
        self.grammar, self.param, self.trigger = grammar, param, trigger
        self._constrainer = constrainer
        self._template = constrainer.recall(grammar, param) if constrainer is not None else None

    def bind(self, constrainer: Constrainer) -> None:
        if self._constrainer is None:
            self._constrainer = constrainer
            self._template = constrainer.recall(self.grammar, self.param)

    def __call__(self) -> GrammarConstraint:
        if self._constrainer is None:
            raise RuntimeError("a grammar factory must be bound to a Constrainer before use")
        return self._constrainer.constraint(self._template, self.trigger)

    def __getstate__(self) -> dict[str, Any]:
        return {"grammar": self.grammar, "param": self.param, "trigger": self.trigger}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._constrainer, self._template = None, None
