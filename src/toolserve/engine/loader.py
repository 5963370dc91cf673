"""Loads a GGUF model and creates its context; loads and applies LoRA adapter sets.

The high-level `Llama` of llama-cpp-python only loads the model and creates the context here
(with the settings its constructor has no argument for, `_Llama`); everything after that goes
through the low-level bindings.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp

from toolserve.engine import placement
from toolserve.engine.base import Lora
from toolserve.errors import EngineFailure, ModelLoadError

_LOG_ERROR = 4  # ggml_log_level GGML_LOG_LEVEL_ERROR (ggml.h)

# KV cache element types that llama.cpp accepts for --cache-type-k / --cache-type-v
KV_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32,
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q5_1": llama_cpp.GGML_TYPE_Q5_1,
    "q5_0": llama_cpp.GGML_TYPE_Q5_0,
    "q4_1": llama_cpp.GGML_TYPE_Q4_1,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL,
}


class _Llama(llama_cpp.Llama):
    """`Llama` with the settings its constructor has no argument for: llama.cpp's
    `use_extra_bufts` (weight repacking, off with `--no-repack`) in the model parameters, and
    `overrides` of context parameters (several sequences, each in its own KV stream, flash
    attention's automatic choice). `Llama.__init__` builds both parameter structs itself; the
    model's is set when assigned, the context's is reapplied each time it is read, so the last
    read (when the context is created) carries them."""

    def __init__(self, *, repack: bool, overrides: dict[str, Any] | None = None, **kwargs: object):
        self._repack = repack
        self._overrides = overrides or {}
        super().__init__(**kwargs)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def model_params(self) -> llama_cpp.llama_model_params:
        return self.__dict__["model_params"]  # type: ignore[no-any-return]

    @model_params.setter
    def model_params(self, params: llama_cpp.llama_model_params) -> None:
        params.use_extra_bufts = self._repack
        self.__dict__["model_params"] = params

    @property  # type: ignore[override]
    def context_params(self) -> llama_cpp.llama_context_params:
        params = self.__dict__["context_params"]
        for name, value in self._overrides.items():
            setattr(params, name, value)
        return params  # type: ignore[no-any-return]

    @context_params.setter
    def context_params(self, params: llama_cpp.llama_context_params) -> None:
        self.__dict__["context_params"] = params


def load(
    path: str,
    *,
    n_ctx: int,
    n_batch: int,
    threads: int,
    parallel: int,
    cache_type_k: str,
    cache_type_v: str,
    flash_attn: bool | None,
    repack: bool,
    gpu_layers: int,
    main_gpu: int,
    split_mode: str,
    tensor_split: Sequence[float],
    kv_offload: bool,
    devs_before: list[Any],
) -> llama_cpp.Llama:
    """The model and a context of `parallel` sequences of `n_ctx` cells each."""
    if flash_attn is None:  # llama.cpp's automatic choice, as llama-server's default
        fa = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    else:
        fa = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    if cache_type_v not in ("f16", "f32") and fa == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED:
        raise ModelLoadError("a quantised V cache needs flash attention")
    try:
        return _Llama(
            repack=repack,  # off where the host check found repacked kernels faulting
            # a KV stream of `n_ctx` cells for each sequence: attention then spans only the
            # cells of its own sequence (in one unified cache it spans every cell up to the
            # highest in use, the other sequences' included, masked but computed)
            overrides={"n_seq_max": parallel, "kv_unified": False, "flash_attn_type": fa},
            model_path=path,
            n_ctx=n_ctx * parallel,
            n_batch=n_batch,
            n_ubatch=n_batch,  # an image's embeddings go in one batch (non-causal encoders need it)
            n_threads=threads,
            n_threads_batch=threads,
            type_k=KV_TYPES[cache_type_k],
            type_v=KV_TYPES[cache_type_v],
            # sliding-window models keep the whole KV, so a prefix can be trimmed and reused
            swa_full=True,
            n_gpu_layers=gpu_layers,
            main_gpu=main_gpu,
            split_mode=placement.SPLIT_MODES[split_mode],
            tensor_split=list(tensor_split) or None,
            offload_kqv=kv_offload,
            verbose=False,
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelLoadError(f"cannot load model {path}: {exc}{placement.shortfall(devs_before, gpu_layers)}") from exc


class Adapters:
    """The LoRA adapter sets requests may run under, each adapter file loaded once. `index[i]`
    is the set that request set `i` runs as (adapters at scale 0 left out, equal sets merged, so
    their KV is shared). llama.cpp applies a set to the whole context: `applied` is the one on it."""

    def __init__(self, model: Any, sets: Sequence[Sequence[Lora]]):
        self._model = model
        loaded: dict[str, Any] = {}
        self.sets: list[tuple[tuple[Any, float], ...]] = []
        self._args: list[tuple[Any, Any, int]] = []
        self.index: list[int] = []
        self.applied = 0
        keys: list[tuple[tuple[str, float], ...]] = []
        try:
            for wanted in sets:
                key = tuple(sorted((a.path, a.scale) for a in wanted if a.scale != 0.0))
                for path, _ in key:
                    if path not in loaded:
                        loaded[path] = self._load(path)
                if key not in keys:
                    keys.append(key)
                    members = tuple((loaded[p], scale) for p, scale in key)
                    self.sets.append(members)
                    ptrs = (llama_cpp.llama_adapter_lora_p_ctypes * max(1, len(members)))(*(m[0] for m in members))
                    scales = (ctypes.c_float * max(1, len(members)))(*(m[1] for m in members))
                    self._args.append((ptrs, scales, len(members)))
                self.index.append(keys.index(key))
        finally:
            self._loaded = list(loaded.values())  # freed with the model when a load fails

    def _load(self, path: str) -> Any:
        messages: list[str] = []

        @llama_cpp.llama_log_callback
        def collect(level: int, text: bytes, user_data: object) -> None:
            if level == _LOG_ERROR:
                messages.append(text.decode("utf-8", "replace").strip())

        llama_cpp.llama_log_set(collect, None)
        try:
            adapter = llama_cpp.llama_adapter_lora_init(self._model, path.encode())
        finally:
            from llama_cpp import _logger

            llama_cpp.llama_log_set(_logger.llama_log_callback, None)
        if not adapter:
            reason = messages[-1].split("failed to apply lora adapter: ")[-1] if messages else "llama.cpp could not load it"
            raise ModelLoadError(f"cannot apply the LoRA adapter {path} to this model: {reason}")
        return adapter

    def apply(self, ctx: Any, index: int) -> None:
        ptrs, scales, n = self._args[index]
        if llama_cpp.llama_set_adapters_lora(ctx, ptrs, n, scales) != 0:
            raise EngineFailure(f"llama.cpp refused adapter set {index}")
        self.applied = index

    def free(self) -> None:
        for adapter in self._loaded:
            llama_cpp.llama_adapter_lora_free(adapter)
        self._loaded = []
