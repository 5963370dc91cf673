"""Load a model into a ready Pipeline: resolve the file, start the engine, pick the template."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from toolserve.config import ModelConfig, auto_parallel
from toolserve.engine.base import Engine
from toolserve.engine.llama_cpp import LlamaCppEngine
from toolserve.engine.repack import decide_repack
from toolserve.errors import ModelLoadError
from toolserve.formats.registry import detect_format, get_format
from toolserve.formats.template import ChatTemplate, choose_template
from toolserve.modelfile import bundled_model, find_mmproj, resolve_model
from toolserve.serving.pipeline import Limits, Pipeline
from toolserve.serving.placement import gpu_layers

log = logging.getLogger(__name__)


def _probe_model(path: Path) -> Path:
    """The model the repack check evaluates: the small bundled one (its Q4_1 weights are what
    AMX repacks), else the model itself."""
    try:
        return bundled_model()
    except ModelLoadError:
        return path


def load_pipeline(cfg: ModelConfig, limits: Limits | None = None) -> Pipeline:
    path = resolve_model(cfg.model)
    override = None
    if cfg.chat_template:
        try:
            override = Path(cfg.chat_template).read_text("utf-8")
        except OSError as exc:
            raise ModelLoadError(f"cannot read chat template {cfg.chat_template}: {exc.strerror}") from exc
    log.info("loading %s (%.0f MB)", path, path.stat().st_size / 1e6)
    started = time.perf_counter()
    if cfg.parallel < 0:
        raise ModelLoadError(f"--parallel must be at least 1 (or 0 for automatic), not {cfg.parallel}")
    n = cfg.parallel or auto_parallel(cfg.ctx_size)
    mmproj = cfg.mmproj or find_mmproj(path)
    if mmproj:
        log.info("images: projector %s", mmproj)
    threads = cfg.threads or os.cpu_count() or 1
    repack = decide_repack(cfg.no_repack, str(_probe_model(path)))
    layers, chosen = gpu_layers(cfg, path, n)
    engine: Engine = LlamaCppEngine(
        str(path),
        n_ctx=cfg.ctx_size,
        n_threads=threads,
        cache_ram_mb=cfg.cache_ram,
        cache_type_k=cfg.cache_type_k,
        cache_type_v=cfg.cache_type_v,
        mmproj=mmproj,
        repack=repack,
        parallel=n,
        flash_attn=None if cfg.flash_attn == "auto" else cfg.flash_attn == "on",
        gpu_layers=layers,
        main_gpu=cfg.main_gpu,
        split_mode=cfg.split_mode,
        tensor_split=cfg.tensor_split,
        kv_offload=not cfg.no_kv_offload,
        placed_by=chosen,
    )
    info = engine.info
    source, label = choose_template(info.chat_template, info.architecture, override)
    template = ChatTemplate(source, bos_token=info.bos_token, eos_token=info.eos_token, label=label)
    fmt_id = cfg.tool_format if cfg.tool_format != "auto" else detect_format(source, info.architecture)
    fmt = get_format(fmt_id)
    model_id = cfg.model_alias or path.stem
    log.info(
        "loaded %s in %.2f s: architecture %s, context %d per sequence, %d sequence(s), chat template %s, tool format %s, weight repacking %s",
        model_id, time.perf_counter() - started, info.architecture, info.n_ctx, n, label, fmt_id, "on" if repack else "off",
    )
    if info.placement is not None:
        log.info("%s: %s", model_id, info.placement.summary())
    return Pipeline(engine, template, model_id, fmt, limits)
