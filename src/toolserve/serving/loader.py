"""Load a model into a ready Pipeline: resolve the file, start the engine, pick the template."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from toolserve.config import ModelConfig
from toolserve.engine.llama_cpp import LlamaCppEngine
from toolserve.errors import ModelLoadError
from toolserve.formats.registry import detect_format, get_format
from toolserve.formats.template import ChatTemplate, choose_template
from toolserve.modelfile import resolve_model
from toolserve.serving.pipeline import Limits, Pipeline

log = logging.getLogger(__name__)


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
    engine = LlamaCppEngine(
        str(path),
        n_ctx=cfg.ctx_size,
        n_threads=cfg.threads,
        cache_ram_mb=cfg.cache_ram,
        cache_type_k=cfg.cache_type_k,
        cache_type_v=cfg.cache_type_v,
    )
    info = engine.info
    source, label = choose_template(info.chat_template, info.architecture, override)
    template = ChatTemplate(source, bos_token=info.bos_token, eos_token=info.eos_token, label=label)
    fmt_id = cfg.tool_format if cfg.tool_format != "auto" else detect_format(source, info.architecture)
    fmt = get_format(fmt_id)
    model_id = cfg.model_alias or path.stem
    log.info(
        "loaded %s in %.2f s: architecture %s, context %d, chat template %s, tool format %s",
        model_id, time.perf_counter() - started, info.architecture, info.n_ctx, label, fmt_id,
    )
    return Pipeline(engine, template, model_id, fmt, limits)
