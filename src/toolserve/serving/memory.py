"""What a local model takes in memory, read from its GGUF header: the bytes of one token's KV
cache in each layer (which the GPU placement sizes layers with, serving/placement.py) and the
whole model's estimate (which the registry's memory budget counts, serving/registry.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolserve.config import ModelConfig, auto_parallel
from toolserve.models.files import gguf_metadata, model_bytes, resolve_model

log = logging.getLogger(__name__)

MB = 1024 * 1024
# bytes per element of each KV cache type (block formats: block bytes / 32 elements)
KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


def kv_bytes_per_layer(meta: Mapping[str, Any], cache_type_k: str, cache_type_v: str) -> list[float]:
    """Bytes of one token's K and V in each layer, from the header's attention sizes (none where
    the header's sizes are not numbers: llama.cpp refuses such a file when it loads it)."""
    try:
        return _kv_bytes_per_layer(meta, cache_type_k, cache_type_v)
    except (TypeError, ValueError):
        return []


def _kv_bytes_per_layer(meta: Mapping[str, Any], cache_type_k: str, cache_type_v: str) -> list[float]:
    arch = str(meta.get("general.architecture", ""))

    def num(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    n_layer = int(num("block_count") or 0)
    n_embd = int(num("embedding_length") or 0)
    n_head = num("attention.head_count") or 0
    heads = max(n_head or [0]) if isinstance(n_head, list) else int(n_head)
    n_head_kv = num("attention.head_count_kv", n_head)
    per_layer = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    k_len = int(num("attention.key_length", n_embd // heads if heads else 0))
    v_len = int(num("attention.value_length", k_len))
    return [int(h or 0) * (k_len * KV_BYTES[cache_type_k] + v_len * KV_BYTES[cache_type_v]) for h in per_layer]


def sequences(cfg: ModelConfig, meta: Mapping[str, Any], n_ctx: int | None = None) -> int:
    """The sequences a local model is loaded with: --parallel, or automatic from the context
    size and the bytes of a token's KV (config.auto_parallel)."""
    if cfg.parallel:
        return cfg.parallel
    per_token = sum(kv_bytes_per_layer(meta, cfg.cache_type_k, cfg.cache_type_v))
    return auto_parallel(n_ctx or cfg.ctx_size, per_token)


def memory_estimate(cfg: ModelConfig) -> int:
    """Bytes a local model takes once loaded: the GGUF file, the KV cache of its --parallel
    sequences (from the file's metadata) and the prompt-cache budget."""
    path = resolve_model(cfg.model)
    meta: dict[str, Any] = gguf_metadata(path)
    arch = str(meta.get("general.architecture", ""))
    n_ctx = cfg.ctx_size or int(meta.get(f"{arch}.context_length", 4096))
    per_token = sum(kv_bytes_per_layer(meta, cfg.cache_type_k, cfg.cache_type_v))
    if not per_token:
        log.info("%s: no attention sizes in the GGUF metadata; its KV cache is left out of the estimate", path)
    kv = int(per_token * n_ctx) * sequences(cfg, meta, n_ctx)
    mmproj = getattr(cfg, "mmproj", None)  # an image projector is loaded beside the model
    extra = Path(mmproj).stat().st_size if mmproj and Path(mmproj).is_file() else 0
    adapters = sum(Path(a.path).stat().st_size for a in (*cfg.lora, *(m.lora for m in cfg.lora_models)) if Path(a.path).is_file())
    return model_bytes(path) + extra + adapters + kv + cfg.cache_ram * MB
