"""A model's vocabulary: tokenize, detokenize and llguidance's view of it, over a llama.cpp vocab.

`VocabView` reads a vocab it does not own (a loaded model's: the engine, the embedder). `Vocab`
loads one without the weights: what the HTTP process needs to tokenize, detokenize and build
grammars while the weights and the context live in the engine process.

llama.cpp loads a GGUF with `vocab_only` in milliseconds and a few MB; the tokens it gives are
the engine process's own (the same file, the same code), so a prompt tokenized here is what the
engine would have made of it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp

from toolserve.engine.base import FimTokens
from toolserve.engine.slots import Turns
from toolserve.errors import EngineFailure, ModelLoadError


class VocabView:
    """Read-only calls on a llama.cpp vocab (safe from any thread); the caller keeps its model alive."""

    def __init__(self, vocab: Any):
        self.vocab = vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        self._pieces: dict[int, bytes] = {}  # token id -> text bytes, special tokens included
        self._eog: list[int] | None = None

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        room = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * room)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, room, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            room = -n  # too small: llama.cpp says how many it needs

    def token_piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(256)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
            piece = self._pieces[token] = buf.raw[: max(n, 0)]
        return piece

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.token_piece(t) for t in tokens)

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def eog_ids(self) -> list[int]:
        """Every end-of-generation token (end of turn, end of text), in id order (read once)."""
        if self._eog is None:
            self._eog = [t for t in range(self.n_vocab) if self.is_eog(t)]
        return list(self._eog)

    def control_ids(self) -> list[int]:
        """Every control token (`<|im_start|>`, `<start_of_turn>`, ...), in id order."""
        control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
        return [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_get_attr(self.vocab, t) & control]

    def fim_tokens(self) -> FimTokens | None:
        """The fill-in-the-middle tokens, or None where prefix, suffix or middle is missing."""
        null = llama_cpp.LLAMA_TOKEN_NULL

        def get(name: str) -> int | None:
            token = getattr(llama_cpp, f"llama_vocab_fim_{name}")(self.vocab)
            return None if token == null else int(token)

        pre, suf, mid = get("pre"), get("suf"), get("mid")
        if pre is None or suf is None or mid is None:
            return None
        return FimTokens(pre, suf, mid, get("rep"), get("sep"))

    def turns(self) -> Turns:
        """How this vocabulary's chat turns end and open (where the engine ends prompt chunks)."""
        return Turns(frozenset(self.eog_ids()), frozenset(self.control_ids()), lambda t: b"\n" in self.token_piece(t))

    def grammar_tokenizer(self) -> object:
        """llguidance's view of this vocabulary, with every end-of-generation token."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        eog = self.eog_ids()
        try:
            return lltokenizer_from_vocab(self.vocab, eos_token=eog or None)
        except (ValueError, RuntimeError) as exc:
            raise EngineFailure(f"cannot read this model's vocabulary for constrained decoding: {exc}") from exc


class Vocab(VocabView):
    """The vocabulary of a GGUF file, loaded without its weights (`vocab_only`)."""

    def __init__(self, path: str):
        from llama_cpp import _logger

        _logger.set_verbose(False)  # llama.cpp's loading chatter stays out of the server's log, as with Llama(verbose=False)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not self._model:
            raise ModelLoadError(f"cannot read the vocabulary of {path}")
        super().__init__(llama_cpp.llama_model_get_vocab(self._model))

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None
