"""Small LoRA adapters for the bundled model, written with the `gguf` package (no download).

`make_lora(base, out, seed)` reads the base GGUF's tensor shapes and writes an adapter with
rank-`rank` A and B matrices for each layer's attention query and value projections, drawn from
a seeded normal distribution: non-zero, so greedy output provably changes under it, and two
seeds give two different adapters. `make_bad_lora` writes files llama.cpp must refuse.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

TARGETS = ("attn_q", "attn_v")


def _base_shapes(base: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The base model's architecture and, for each targeted weight, (n_in, n_out) as ggml orders them."""
    reader = gguf.GGUFReader(base)
    field = reader.fields["general.architecture"]
    arch = bytes(field.parts[field.data[0]]).decode()
    shapes = {}
    for t in reader.tensors:
        if t.name.endswith(".weight") and t.name.split(".")[-2] in TARGETS:
            shapes[t.name] = (int(t.shape[0]), int(t.shape[1]))
    return arch, shapes


def make_lora(base: Path, out: Path, seed: int, *, rank: int = 8, std: float = 0.15, arch: str | None = None) -> Path:
    """Write a LoRA adapter GGUF for `base` to `out` (kept if it exists) and return its path."""
    if out.exists():
        return out
    base_arch, shapes = _base_shapes(base)
    rng = np.random.default_rng(seed)
    tmp = out.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), arch or base_arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    for name, (n_in, n_out) in sorted(shapes.items()):
        # numpy shapes are ggml's reversed: A is ggml [n_in, rank], B is ggml [rank, n_out]
        w.add_tensor(name + ".lora_a", rng.normal(0.0, std, (rank, n_in)).astype(np.float32))
        w.add_tensor(name + ".lora_b", rng.normal(0.0, std, (n_out, rank)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.rename(out)
    return out


def make_bad_lora(base: Path, out: Path, kind: str) -> Path:
    """An adapter llama.cpp refuses: `wrong-arch` (made for another architecture), `not-lora`
    (a GGUF that is not an adapter), `wrong-shape` (tensors of another base model's size)."""
    if kind == "wrong-arch":
        return make_lora(base, out, 0, arch="qwen2")
    _, shapes = _base_shapes(base)
    w = gguf.GGUFWriter(str(out), "llama")
    if kind == "not-lora":
        w.add_type(gguf.GGUFType.MODEL)
        w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    elif kind == "wrong-shape":
        w.add_type(gguf.GGUFType.ADAPTER)
        w.add_string(gguf.Keys.Adapter.TYPE, "lora")
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 4.0)
        name = sorted(shapes)[0]
        w.add_tensor(name + ".lora_a", np.zeros((4, 100), np.float32))
        w.add_tensor(name + ".lora_b", np.zeros((100, 4), np.float32))
    else:
        raise ValueError(kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
