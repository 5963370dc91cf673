"""Load a model into a ready Pipeline: resolve the file, start the engine, pick the template."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from toolserve.config import ModelConfig
from toolserve.engine import cores
from toolserve.engine.base import Engine, Lora
from toolserve.engine.llama_cpp import LlamaCppEngine
from toolserve.engine.remote import RemoteEngine
from toolserve.engine.repack import decide_repack
from toolserve.errors import ModelLoadError
from toolserve.formats.registry import detect_format, get_format
from toolserve.formats.template import ChatTemplate, choose_template
from toolserve.models import sampling
from toolserve.models.files import (
    bundled_model,
    find_mmproj,
    gguf_metadata,
    is_bundled_file,
    model_bytes,
    model_parts,
    resolve_model,
)
from toolserve.models.refs import model_stem
from toolserve.serving.memory import sequences
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


def cpu_shares() -> str | None:
    """The shares directory for an embedding context, which computes on the CPU unless
    llama.cpp was built with a GPU backend (engine/cores.py)."""
    from toolserve.engine import placement as pl

    return None if pl.gpu_offload() else cores.shared()


def attach_embedder(engine: Engine, *, n_ctx: int, n_threads: int, repack: bool) -> None:
    """--embeddings: an embedding context on the generation engine's weights. In the server's
    process (--no-engine-process) it shares the loaded `llama_model`; beside an engine process
    the server loads the file too (memory-mapped: the file's pages are shared with the engine
    process, not weights that repacking copied) and embeds in its own process."""
    from toolserve.engine.embed import Embedder, beside

    try:
        if isinstance(engine, LlamaCppEngine):
            embedder = beside(engine._llm, n_ctx=n_ctx, n_threads=n_threads, core_shares=cpu_shares())
        else:
            embedder = Embedder.load(engine.info.path, n_ctx=n_ctx, n_threads=n_threads, repack=repack, core_shares=cpu_shares())
    except ModelLoadError:
        engine.close()
        raise
    engine.embedder = embedder  # type: ignore[attr-defined]  # closed by the engine's close()
    e = embedder
    log.info("embeddings: %d dimensions, %s pooling, inputs up to %d tokens", e.dimensions, e.pooling, e.n_ctx)


def check_adapter(spec: Lora, arch: str) -> None:
    """Refuse, naming the file and the reason, an adapter llama.cpp could not apply to a model
    of architecture `arch` (llama.cpp itself still checks the tensor shapes)."""
    where = f"LoRA adapter {spec.path}"
    if not Path(spec.path).is_file():
        raise ModelLoadError(f"{where}: no such file")
    try:
        meta = gguf_metadata(spec.path)
    except (ModelLoadError, OSError, ValueError):
        raise ModelLoadError(
            f"{where} is not a GGUF file (a PEFT adapter converts with llama.cpp's convert_lora_to_gguf.py)"
        ) from None
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        kind = meta.get("general.type") or "without general.type"
        raise ModelLoadError(f"{where} is not a LoRA adapter (a GGUF of type {kind})")
    made_for = meta.get("general.architecture")
    if made_for != arch:
        raise ModelLoadError(f"{where} was made for a {made_for} model; this model is {arch}")


def adapter_label(cfg: ModelConfig, path: Path) -> str:
    """The model's id: --model-alias, else the reference's short name or the file's stem (a
    split model's without its -00001-of-0000N), with the stem of each --lora adapter after a
    '+' (so /v1/models says which adapters are on)."""
    if cfg.model_alias:
        return cfg.model_alias
    name = cfg.origin.name if cfg.origin is not None else model_stem(path.name)
    return "+".join([name, *(Path(a.path).stem + ("" if a.scale == 1.0 else f"@{a.scale:g}") for a in cfg.lora)])


def is_bundled(path: Path) -> bool:
    """The bundled model's file or a copy of it (an Ollama or LM Studio store's, by hash)."""
    try:
        if path.resolve() == bundled_model().resolve():
            return True
    except ModelLoadError:
        pass
    return is_bundled_file(path)


def sampling_defaults(cfg: ModelConfig, path: Path, flags: dict[str, float], meta: dict[str, object] | None = None) -> dict[str, sampling.Default]:
    """The sampling each field of a request that sends none gets on this model, and why
    (models/sampling.py): the server's flags over the model's source over its GGUF."""
    meta = gguf_metadata(path) if meta is None else meta
    origin = cfg.origin
    return sampling.model_defaults(
        meta, local=True, bundled=is_bundled(path), source_sampling=dict(origin.sampling) if origin else None,
        source_name=f"{origin.source} ({origin.reference})" if origin else "", flags=flags,
    )


def load_pipeline(cfg: ModelConfig, limits: Limits | None = None) -> Pipeline:
    path = resolve_model(cfg.model)
    names = [adapter_label(cfg, path), *(m.id for m in cfg.lora_models)]
    for i, name in enumerate(names[1:], 1):
        if name in names[:i]:
            raise ModelLoadError(f"--lora-model {name}: the model id '{name}' is served already; choose another name")
    meta = gguf_metadata(path)  # the header, read once: adapters' architecture, sequences, sampling defaults
    if cfg.lora or cfg.lora_models:
        arch = str(meta.get("general.architecture", ""))
        for spec in (*cfg.lora, *(m.lora for m in cfg.lora_models)):
            check_adapter(spec, arch)
    override = None
    if cfg.chat_template:
        try:
            override = Path(cfg.chat_template).read_text("utf-8")
        except OSError as exc:
            raise ModelLoadError(f"cannot read chat template {cfg.chat_template}: {exc.strerror}") from exc
    parts = model_parts(path)
    log.info("loading %s (%.0f MB%s)", path, model_bytes(path) / 1e6, f" in {len(parts)} parts" if len(parts) > 1 else "")
    started = time.perf_counter()
    if cfg.parallel < 0:
        raise ModelLoadError(f"--parallel must be at least 1 (or 0 for automatic), not {cfg.parallel}")
    n = sequences(cfg, meta)
    mmproj = cfg.mmproj or find_mmproj(path)
    if mmproj:
        log.info("images: projector %s", mmproj)
    threads = cores.threads(cfg.threads)
    repack = decide_repack(cfg.no_repack, str(_probe_model(path)))
    layers, chosen = gpu_layers(cfg, path, n)
    settings = dict(
        path=str(path),
        n_ctx=cfg.ctx_size,
        n_threads=threads,
        cache_ram_mb=cfg.cache_ram,
        cache_type_k=cfg.cache_type_k,
        cache_type_v=cfg.cache_type_v,
        mmproj=mmproj,
        repack=repack,
        parallel=n,
        flash_attn=None if cfg.flash_attn == "auto" else cfg.flash_attn == "on",
        speculative=cfg.speculative,
        # set 0: the model's own id (--lora); then one set per --lora-model, its adapter alone
        adapters=[list(cfg.lora), *([m.lora] for m in cfg.lora_models)],
        gpu_layers=layers,
        main_gpu=cfg.main_gpu,
        split_mode=cfg.split_mode,
        tensor_split=cfg.tensor_split,
        kv_offload=not cfg.no_kv_offload,
        placed_by=chosen,
        core_shares=cores.shared(),
    )
    engine: Engine
    if cfg.engine_process:  # a native fault ends that process, not the server (engine/remote.py)
        engine = RemoteEngine(settings, hang_timeout=cfg.engine_timeout)
    else:
        engine = LlamaCppEngine(**settings)  # type: ignore[arg-type]
    if cfg.embeddings:
        attach_embedder(engine, n_ctx=cfg.ctx_size, n_threads=threads, repack=repack)
    info = engine.info
    source, label = choose_template(info.chat_template, info.architecture, override)
    template = ChatTemplate(source, bos_token=info.bos_token, eos_token=info.eos_token, label=label)
    fmt_id = cfg.tool_format if cfg.tool_format != "auto" else detect_format(source, info.architecture)
    fmt = get_format(fmt_id)
    model_id = adapter_label(cfg, path)
    log.info(
        "loaded %s in %.2f s: architecture %s, context %d per sequence, %d sequence(s), chat template %s, tool format %s, weight repacking %s",
        model_id, time.perf_counter() - started, info.architecture, info.n_ctx, n, label, fmt_id, "on" if repack else "off",
    )
    if isinstance(engine, RemoteEngine):
        log.info("%s: engine process %d (restarted if it dies or hangs for %g s)", model_id, engine.pid, cfg.engine_timeout)
    if info.placement is not None:
        log.info("%s: %s", model_id, info.placement.summary())
    for a in cfg.lora:
        log.info("%s: LoRA adapter %s at scale %g", model_id, a.path, a.scale)
    for m in cfg.lora_models:
        log.info("%s: LoRA adapter %s at scale %g on %s's weights", m.id, m.lora.path, m.lora.scale, model_id)
    if cfg.origin is not None and cfg.origin.source == "ollama":
        log.info("%s: chat template from the GGUF (%s); Ollama's Go template is not used", model_id, label)
    pipe = Pipeline(engine, template, model_id, fmt, limits)
    pipe.sampling_defaults = sampling_defaults(cfg, path, pipe.limits.sampling_defaults, meta)
    skipped = sampling.from_gguf(meta)[1]
    if skipped:
        log.info("%s: sampling keys not applied: %s", model_id, ", ".join(skipped))
    given = {k: f"{d.value:g} ({d.source})" for k, d in pipe.sampling_defaults.items() if d.source != sampling.PROTOCOL_SOURCE}
    if given:
        log.info("%s: sampling defaults %s", model_id, ", ".join(f"{k} {v}" for k, v in given.items()))
    pipe.adapters = tuple(cfg.lora)
    pipe.adapter_ids = {m.id: (i + 1, m.lora) for i, m in enumerate(cfg.lora_models)}
    return pipe
