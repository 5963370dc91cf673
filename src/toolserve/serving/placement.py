"""How many layers of a model go to the GPU: --gpu-layers (auto, all or a number) checked
against the devices llama.cpp sees and the memory the model's file says it needs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from toolserve.config import ModelConfig
from toolserve.engine import placement as pl
from toolserve.errors import ModelLoadError
from toolserve.models.files import gguf_metadata
from toolserve.serving.memory import kv_bytes_per_layer

log = logging.getLogger(__name__)

N_UBATCH = 512  # the engine's micro-batch (LlamaCppEngine's n_batch, slots.PREFILL_CHUNK, plus one token per sequence)


def gguf_shape(meta: dict[str, object], cache_type_k: str, cache_type_v: str) -> pl.GgufShape:
    """The sizes the fit needs from a GGUF header; KV bytes per token of each layer."""
    arch = str(meta.get("general.architecture", ""))

    def num(key: str) -> Any:
        return meta.get(f"{arch}.{key}")

    kv = tuple(int(b) for b in kv_bytes_per_layer(meta, cache_type_k, cache_type_v))
    n_vocab = int(num("vocab_size") or 65536)  # not in every header; a large guess
    return pl.GgufShape(int(num("block_count") or 0), n_vocab, int(num("embedding_length") or 0), kv)


def _mib(n: int) -> str:
    return f"{n // pl.MiB} MiB"


def gpu_layers(cfg: ModelConfig, path: Path, n_seq: int) -> tuple[int, str]:
    """The layer count to give llama.cpp, and how it was chosen. Errors name the setting."""
    asked = cfg.gpu_layers
    if not pl.gpu_offload():
        if asked not in ("auto", "0"):
            log.warning("--gpu-layers %s: llama.cpp was built without a GPU backend; all layers stay on the CPU", asked)
        return 0, "auto" if asked == "auto" else f"--gpu-layers {asked}"
    devs = pl.devices()
    if not devs:
        return 0, "no GPU found"
    if cfg.split_mode != "layer" and cfg.main_gpu >= len(devs):
        names = ", ".join(f"{d.index}: {d.name} ({d.description})" for d in devs)
        raise ModelLoadError(f"--main-gpu {cfg.main_gpu}: there is no such GPU (found {names})")
    if len(cfg.tensor_split) > len(devs):
        raise ModelLoadError(f"--tensor-split gives {len(cfg.tensor_split)} shares, but there are {len(devs)} GPUs")
    tensors: dict[str, int] = {}
    meta = gguf_metadata(path, tensors=tensors)
    shape = gguf_shape(meta, cfg.cache_type_k, cfg.cache_type_v)
    costs = pl.layer_costs(shape, tensors, cfg.ctx_size * n_seq, N_UBATCH, not cfg.no_kv_offload)
    used = pl.used_devices(devs, cfg.split_mode, cfg.main_gpu)
    shares = pl.splits(used, cfg.tensor_split)
    n_all = shape.n_layer + 1
    fit = pl.fit_layers(costs, used, shares)
    free = ", ".join(f"{d.name} {_mib(d.free)} free" for d in used)
    if asked == "auto":
        if fit < n_all:
            need = sum(pl.needs(costs, n_all, shares))
            log.warning(
                "auto placement: %d of %d layers fit on the GPU (all would need about %s; %s, keeping %s free on each); the rest run on the CPU",
                fit, n_all, _mib(need), free, _mib(pl.MARGIN),
            )
            return fit, f"auto: {fit} of {n_all} fit"
        return fit, "auto: all fit"
    want = n_all if asked == "all" else min(int(asked), n_all)
    for dev, need in zip(used, pl.needs(costs, want, shares), strict=True):
        if need > dev.free:
            raise ModelLoadError(
                f"--gpu-layers {asked}: {want} layers need about {_mib(need)} on {dev.name} ({dev.description}), "
                f"which has {_mib(dev.free)} free; {fit} fit there: use --gpu-layers auto or {fit}"
            )
    if want > fit:
        log.warning("--gpu-layers %s: %d layers leave less than %s free on the GPU (%s); auto would place %d", asked, want, _mib(pl.MARGIN), free, fit)
    return want, f"--gpu-layers {asked}"
