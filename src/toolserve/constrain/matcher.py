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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import numpy as np

from toolserve.errors import InvalidRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Arming:
    """When a lazy grammar starts to hold: at the first of `triggers` (marker, lead) in the
    output; a lead marker only where the output starts (after blank space, or after a `quiet`
    block). Between `quiet`'s open and close (a reasoning block, with `quiet_first` from the
    start) no marker counts. From a marker on, the grammar reads the output from the marker's
    first character (formats/constraint.py writes it so)."""

    triggers: tuple[tuple[str, bool], ...]
    quiet: tuple[str, str] | None = None
    quiet_first: bool = False


class GrammarConstraint:
    """Masks tokens with an llguidance matcher, from the start or, lazily, once `arming` says."""

    def __init__(self, template: Any, tokenizer: Any, piece: Callable[[int], bytes], n_vocab: int, arming: Arming | None = None,
                 on_error: Callable[[], None] | None = None):
        self._template = template
        self._on_error = on_error  # the matcher failed: its template is no good either
        self._tokenizer = tokenizer
        self._piece = piece
        self._n_vocab = n_vocab
        self._matcher: Any = None if arming is not None else template.deep_copy()
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)  # one bit per token, reused
        self.abandoned = False
        if arming is not None:
            self._anywhere = [m.encode() for m, lead in arming.triggers if not lead]
            self._leads = [m.encode() for m, lead in arming.triggers if lead]
            self._quiet = (arming.quiet[0].encode(), arming.quiet[1].encode()) if arming.quiet else None
            self._in_quiet = arming.quiet_first and self._quiet is not None
            self._at_start = True  # nothing but blank space since the start (or a quiet block)
            self._seen = b""  # the output not yet ruled out as the start of a marker
            self._keep = max([len(m) for m in (*self._anywhere, *self._leads, *(self._quiet or ()))], default=1)

    def forbidden(self) -> np.ndarray | None:
        if self._matcher is None:
            return None
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._matcher.is_error():  # its mask would allow the end of text only: the answer would stop here
            self._fail(self._matcher.get_error())
            return None
        # inverting the packed words first is the cheapest way to a forbidden-token mask
        return np.unpackbits((~self._bits).view(np.uint8), count=self._n_vocab, bitorder="little").view(np.bool_)

    def accept(self, token: int) -> None:
        if self.abandoned:
            return
        if self._matcher is not None:
            if not self._matcher.consume_token(token):
                self._fail(f"token {token} rejected: {self._matcher.get_error()}")
            return
        self._seen += self._piece(token)
        self._watch()

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` the grammar accepts in order from here, without consuming them
        (a speculative draft). Before a lazy grammar is armed nothing is restricted yet."""
        if self._matcher is None:
            return len(tokens)
        return int(self._matcher.validate_tokens(list(tokens)))

    def _watch(self) -> None:
        """Look for a marker in what was seen; arm the grammar at the first one."""
        while True:
            if self._in_quiet:
                assert self._quiet is not None
                at = self._seen.find(self._quiet[1])
                if at < 0:
                    self._seen = self._seen[-(self._keep - 1) :] if self._keep > 1 else b""
                    return
                self._seen, self._in_quiet, self._at_start = self._seen[at + len(self._quiet[1]) :], False, True
            if self._at_start and self._leads:
                text = self._seen.lstrip(b" \t\r\n")
                if not text:
                    return
                for marker in self._leads:
                    if text.startswith(marker):
                        self._arm(text)
                        return
                if any(marker.startswith(text) for marker in self._leads):
                    return  # maybe a lead marker, still arriving
            self._at_start = False
            hits = [(self._seen.find(m), m) for m in self._anywhere]
            if self._quiet is not None:
                hits.append((self._seen.find(self._quiet[0]), b""))
            found = [(at, m) for at, m in hits if at >= 0]
            if not found:
                self._seen = self._seen[-(self._keep - 1) :] if self._keep > 1 else b""
                return
            at, marker = min(found, key=lambda h: h[0])
            if marker:
                self._arm(self._seen[at:])
                return
            assert self._quiet is not None
            self._seen, self._in_quiet = self._seen[at + len(self._quiet[0]) :], True

    def _arm(self, text: bytes) -> None:
        self._matcher = self._template.deep_copy()
        if not self._matcher.consume_tokens(self._tokenizer.tokenize_bytes(text)):
            self._abandon("the call marker and what follows it do not fit the grammar")

    def done(self) -> bool:
        return self._matcher is not None and not self.abandoned and bool(self._matcher.is_stopped())

    def _fail(self, why: str) -> None:
        """The matcher broke (llguidance's lexer out of its budget): every copy of its template
        shares that lexer, so the template is dropped as well, and this answer goes on free."""
        self._abandon(why)
        if self._on_error is not None:
            self._on_error()

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
        self._specials: dict[str, int] | None = None

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

    def factory(self, grammar: str, *, param: str, arming: Arming | None = None) -> GrammarFactory:
        return GrammarFactory(grammar, param, arming, self)

    def constraint(self, template: Any, arming: Arming | None, on_error: Callable[[], None] | None = None) -> GrammarConstraint:
        return GrammarConstraint(template, self.tokenizer, self._piece, self._n_vocab, arming, on_error)

    def forget(self, grammar: str) -> None:
        with self._lock:
            self._compiled.pop(grammar, None)

    @property
    def specials(self) -> dict[str, int]:
        """The vocabulary's special tokens by their text: llguidance reads them only by id
        (formats/grammar.Writer writes a marker that is one of them as that token)."""
        with self._lock:
            found = self._specials
        if found is None:
            tok = self.tokenizer
            found = {}
            for token in range(self._n_vocab):
                if tok.is_special_token(token):
                    text = self._piece(token).decode("utf-8", "replace")
                    if text:
                        found.setdefault(text, token)
            with self._lock:
                self._specials = found
        return found

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
    only its grammar and arming; `bind` gives it the engine process's Constrainer."""

    def __init__(self, grammar: str, param: str, arming: Arming | None, constrainer: Constrainer | None):
        self.grammar, self.param, self.arming = grammar, param, arming
        self._constrainer = constrainer
        self._template = constrainer.recall(grammar, param) if constrainer is not None else None

    def bind(self, constrainer: Constrainer) -> None:
        if self._constrainer is None:
            self._constrainer = constrainer
            self._template = constrainer.recall(self.grammar, self.param)

    def __call__(self) -> GrammarConstraint:
        if self._constrainer is None:
            raise RuntimeError("a grammar factory must be bound to a Constrainer before use")
        return self._constrainer.constraint(self._template, self.arming, self._renew)

    def _renew(self) -> None:
        """A matcher of ours broke: the next choice and the next request compile afresh."""
        assert self._constrainer is not None
        self._constrainer.forget(self.grammar)
        self._template = self._constrainer.recall(self.grammar, self.param)

    def __getstate__(self) -> dict[str, Any]:
        return {"grammar": self.grammar, "param": self.param, "arming": self.arming}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._constrainer, self._template = None, None
