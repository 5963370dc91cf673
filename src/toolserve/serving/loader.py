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

log = logging.getLogger(__name__)


def _probe_model(path: Path) -> Path:
    """The model the repack check evaluates: the small bundled one (its Q4_1 weights are what
    AMX repacks), else the model itself."""
    try:
        return bundled_model()
    except ModelLoadError:
        return path


def attach_embedder(engine: Engine, *, n_ctx: int, n_threads: int) -> None:
    """--embeddings: an embedding context on the generation engine's loaded weights."""
    from toolserve.engine.embed import beside

    if not isinstance(engine, LlamaCppEngine):
        raise ModelLoadError("--embeddings needs a local GGUF model")
    try:
        engine.embedder = beside(engine._llm, n_ctx=n_ctx, n_threads=n_threads)
    except ModelLoadError:
        engine.close()
        raise
    e = engine.embedder
    log.info("embeddings: %d dimensions, %s pooling, inputs up to %d tokens", e.dimensions, e.pooling, e.n_ctx)


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
    )
    if cfg.embeddings:
        attach_embedder(engine, n_ctx=cfg.ctx_size, n_threads=threads)
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
    return Pipeline(engine, template, model_id, fmt, limits)
