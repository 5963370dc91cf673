"""Typed settings. Every CLI flag of `toolserve serve` has a TOOLSERVE_* environment twin."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from toolserve.engine.base import Lora  # a LoRA adapter GGUF and its scale (`--lora PATH[:SCALE]`)

KV_TYPE_NAMES = ("f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")


AUTO_PARALLEL_TOKENS = 16384  # the KV the automatic --parallel sizes for: 4 sequences of 4096 tokens
# and beyond that, up to 8 sequences while their KV takes at most this: a burst of 8 agents or
# chat tabs is decoded together instead of half of it waiting (bench/README.md, issue 43); 8 at
# 4096 tokens is 755 MB on the bundled model, 403 MB on Qwen2.5-0.5B; 1B models and up keep 4
AUTO_PARALLEL_KV_BYTES = 1 << 30
AUTO_PARALLEL_MAX = 8


def auto_parallel(ctx_size: int, kv_per_token: float = 0.0) -> int:
    """--parallel's default: as many sequences of ctx_size as fit 16384 tokens of KV (1 to 4), or
    as fit 1 GiB of KV at `kv_per_token` bytes (up to 8) where that is more."""
    ctx = max(1, ctx_size)
    by_tokens = max(1, min(4, AUTO_PARALLEL_TOKENS // ctx))
    by_bytes = int(AUTO_PARALLEL_KV_BYTES // (kv_per_token * ctx)) if kv_per_token > 0 else 0
    return max(by_tokens, min(AUTO_PARALLEL_MAX, by_bytes))


@dataclass(frozen=True)
class ModelOrigin:
    """Where a model named by reference was found (models/resolve.py): what /v1/models and the
    logs name it by, and the sampling defaults its source carries (Ollama's parameters)."""

    reference: str  # the reference in its own syntax: owner/repo:Q4_K_M, hf://..., ollama:..., lmstudio:...
    source: str  # hf | ollama | lmstudio
    name: str  # its short name: the model's id unless --model-alias / `id:` names it
    sampling: tuple[tuple[str, float], ...] = ()  # (field, value) defaults from the source


@dataclass(frozen=True)
class ModelConfig:
    model: str | None = None  # GGUF path or a model reference (models/refs.py); None: the bundled SmolLM2
    model_alias: str | None = None  # id in /v1/models; None: the reference's short name or the file's stem
    ctx_size: int = 4096
    threads: int | None = None  # None: all cores (llama-cpp-python's default is half); shared by the instances
    parallel: int = 0  # sequences decoded together in one context (each up to ctx_size); 0: auto_parallel (serving/memory.sequences)
    chat_template: str | None = None  # Jinja file overriding the model's template
    tool_format: str = "auto"  # a format id from formats/registry.py, or auto-detect
    cache_ram: int = 512  # MB of RAM for prompt-cache snapshots; 0 turns prefix reuse off
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    mmproj: str | None = None  # multimodal projector GGUF; None: one named *mmproj*.gguf beside the model, if any
    no_repack: bool = False  # never let llama.cpp repack weights (else: as the host check says)
    flash_attn: str = "auto"  # on | off | auto (llama.cpp's choice: on where the backend has it)
    speculative: str = "auto"  # on | off | auto | history: drafts from the context (engine/speculative.py), auto where it pays, history also from earlier answers
    embeddings: bool = False  # also serve /v1/embeddings from this model (a second llama context on its weights)
    gpu_layers: str = "auto"  # layers on the GPU: a number, all, or auto (all that fit; 0 without a GPU backend)
    main_gpu: int = 0  # the GPU of the whole model with split_mode none
    split_mode: str = "layer"  # none | layer | row: how a model spreads over several GPUs
    tensor_split: tuple[float, ...] = ()  # each GPU's share of the layers; (): in proportion to free memory
    no_kv_offload: bool = False  # keep the KV cache (and attention) in RAM, not on the GPU
    engine_process: bool = True  # run the engine in a process of its own (a native fault does not end the server)
    engine_timeout: float = 120.0  # seconds an engine process may go without a step while requests run; then it is restarted
    lora: tuple[Lora, ...] = ()  # LoRA adapters applied to this model's id
    lora_models: tuple[LoraModel, ...] = ()  # adapters served as their own ids on the same base weights
    origin: ModelOrigin | None = None  # set once a reference is resolved to its file (not a flag)


@dataclass(frozen=True)
class LoraModel:
    """An adapter served as model `id` on top of a loaded base (`--lora-model NAME=PATH[:SCALE]`):
    the base weights with this adapter alone."""

    id: str
    lora: Lora


def parse_lora(spec: str, where: str) -> Lora:
    """PATH[:SCALE]; a last ':...' that is not a number belongs to the path."""
    path, sep, tail = spec.rpartition(":")
    scale = 1.0
    if sep:
        try:
            scale = float(tail)
        except ValueError:
            path = spec
    else:
        path = spec
    if not path.strip():
        raise ConfigError(f"{where} {spec!r}: expected PATH[:SCALE], e.g. 'my-adapter.gguf:0.8'")
    return Lora(path, scale)


def parse_lora_model(spec: str, where: str) -> LoraModel:
    """NAME=PATH[:SCALE]."""
    name, sep, rest = spec.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise ConfigError(f"{where} {spec!r}: expected NAME=PATH[:SCALE], e.g. 'my-tuned=adapter.gguf'")
    return LoraModel(name.strip(), parse_lora(rest.strip(), where))


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"
    api_key: str | None = None  # also TOOLSERVE_API_KEY
    cors_origins: str | None = None  # comma-separated; None: localhost pages only
    max_body_mb: int = 8
    shutdown_grace: float = 10.0


UPSTREAM_MODES = ("passthrough", "raw")
GUIDED_KINDS = ("openai", "vllm", "none")


@dataclass(frozen=True)
class UpstreamConfig:
    """A model served by another OpenAI-compatible server (vLLM, SGLang, llama.cpp, toolserve)."""

    url: str  # the server's root; a trailing /v1 is accepted
    replicas: tuple[str, ...] = ()  # other servers of the same model (upstream/pool.py chooses per request)
    api_key: str | None = None  # sent as 'Authorization: Bearer KEY'
    upstream_model: str | None = None  # the upstream's name of the model; None: its first listed model
    mode: str = "passthrough"  # passthrough: its chat endpoint; raw: our template + its /v1/completions
    guided: str = "openai"  # how response_format reaches its completions in raw mode: openai | vllm | none
    timeout: float = 600.0  # seconds to wait for the upstream's next bytes
    verify_tls: bool | str = True  # False: no certificate check; a path: a CA bundle
    chat_template: str | None = None  # raw mode: Jinja file; None: the bundled ChatML
    tool_format: str = "auto"  # raw mode: a format id, or detected from the template
    health_interval: float = 5.0  # seconds between health checks while it is up (1 s while down)

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.replicas)


@dataclass(frozen=True)
class ModelEntry:
    """One model of a --config file: local (a GGUF) or upstream."""

    id: str
    local: ModelConfig | None = None
    upstream: UpstreamConfig | None = None
    keep_alive: float | None = None  # local: seconds idle before unloading; None: stays loaded
    preload: bool = False  # local: load at start instead of on first use


@dataclass(frozen=True)
class ModelsConfig:
    models: tuple[ModelEntry, ...]
    default: str  # the model of requests that name none
    memory_mb: int | None = None  # budget for local models (estimated); None: no limit
    model_map: tuple[tuple[str, str], ...] = ()  # (name pattern, model id): other names a model answers to


class ConfigError(ValueError):
    """A --config file that cannot be used; the message is one line naming the place."""


_LOCAL_KEYS = {
    "id", "model", "ctx_size", "threads", "parallel", "chat_template", "tool_format", "cache_ram",
    "cache_type_k", "cache_type_v", "keep_alive", "preload", "mmproj", "no_repack", "flash_attn", "speculative",
    "gpu_layers", "main_gpu", "split_mode", "tensor_split", "no_kv_offload", "lora", "lora_models",
    "engine_process", "engine_timeout", "embeddings",
}
_UPSTREAM_KEYS = {
    "id", "url", "api_key", "api_key_env", "upstream_model", "mode", "guided", "timeout", "verify_tls",
    "chat_template", "tool_format", "health_interval",
}
_TOP_KEYS = {"models", "memory_mb", "keep_alive", "default", "model_map"}
_INHERITED = (
    "ctx_size", "threads", "parallel", "cache_ram", "cache_type_k", "cache_type_v", "no_repack", "flash_attn", "speculative",
    "gpu_layers", "main_gpu", "split_mode", "tensor_split", "no_kv_offload", "engine_process", "engine_timeout",
)
FLASH_ATTN = ("auto", "on", "off")
SPECULATIVE = ("auto", "on", "off", "history")
SPLIT_MODES = ("none", "layer", "row")
MAX_TENSOR_SPLIT = 16  # llama.cpp's LLAMA_MAX_DEVICES


def parse_gpu_layers(value: object) -> str:
    """--gpu-layers / gpu_layers: 'auto', 'all' or a count of layers (0 or more), as a string."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or not (text in ("auto", "all") or text.isdigit()):
        raise ValueError(f"{value!r} is not a number of layers, 'all' or 'auto'")
    return text if not text.isdigit() else str(int(text))


def parse_tensor_split(value: object) -> tuple[float, ...]:
    """--tensor-split / tensor_split: each GPU's share, e.g. '3,1' (or a YAML list), not all 0."""
    items = value if isinstance(value, list | tuple) else str(value).replace("/", ",").split(",")
    try:
        shares = tuple(float(x) for x in items if str(x).strip() != "")
    except ValueError:
        raise ValueError(f"{value!r} is not a comma-separated list of numbers, e.g. 3,1") from None
    if not shares or any(x < 0 or x != x or x == float("inf") for x in shares) or not any(shares):
        raise ValueError(f"{value!r}: expected shares of 0 or more, at least one above 0, e.g. 3,1")
    if len(shares) > MAX_TENSOR_SPLIT:
        raise ValueError(f"{value!r}: more than {MAX_TENSOR_SPLIT} GPUs")
    return shares


def parse_main_gpu(value: object) -> int:
    if isinstance(value, bool) or not str(value).strip().isdigit():
        raise ValueError(f"{value!r} is not a GPU index (0 or more)")
    return int(str(value))


def parse_split_mode(value: object) -> str:
    if value not in SPLIT_MODES:
        raise ValueError(f"{value!r} is not one of {', '.join(SPLIT_MODES)}")
    return str(value)


_PLACEMENT = {"gpu_layers": parse_gpu_layers, "main_gpu": parse_main_gpu, "split_mode": parse_split_mode, "tensor_split": parse_tensor_split}
DEFAULT_KEEP_ALIVE = 300.0


def _typed(where: str, key: str, value: Any, kinds: tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{where}.{key}: expected {what}, got {value!r}")
    if not isinstance(value, kinds):
        raise ConfigError(f"{where}.{key}: expected {what}, got {value!r}")
    return value


def _path(base: Path, value: str) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)


def _keep_alive(where: str, raw: Any) -> float | None:
    if raw is None:
        return None
    value = float(_typed(where, "keep_alive", raw, (int, float), "seconds (a number, or null for never)"))
    return None if value < 0 else value


def _local_entry(where: str, d: dict[str, Any], base: Path, defaults: ModelConfig, keep_alive: float | None) -> ModelEntry:
    from toolserve.errors import ModelLoadError
    from toolserve.models.refs import Bundled, LocalFile, canonical, short_name
    from toolserve.models.refs import parse as parse_ref

    model = d.get("model")
    if model is not None:
        _typed(where, "model", model, (str,), "a GGUF path, a model reference (owner/repo[:QUANT], hf://, ollama:, lmstudio:) or 'bundled'")
    try:
        ref = parse_ref(model, base) if model is not None else Bundled()
    except ModelLoadError as exc:
        raise ConfigError(f"{where}.model: {exc.message}") from None
    # a path relative to the file, or a reference kept as written until the server resolves it
    path = None if isinstance(ref, Bundled) else ref.path if isinstance(ref, LocalFile) else canonical(ref)
    ints: dict[str, Any] = {k: int(_typed(where, k, d[k], (int,), "an integer")) for k in ("ctx_size", "threads", "parallel", "cache_ram") if k in d}
    strs: dict[str, Any] = {k: str(_typed(where, k, d[k], (str,), "a string")) for k in ("chat_template", "tool_format", "cache_type_k", "cache_type_v", "mmproj", "flash_attn", "speculative") if k in d}
    if strs.get("flash_attn", "auto") not in FLASH_ATTN:
        raise ConfigError(f"{where}.flash_attn: {strs['flash_attn']!r} is not one of {', '.join(FLASH_ATTN)}")
    if strs.get("speculative", "auto") not in SPECULATIVE:
        raise ConfigError(f"{where}.speculative: {strs['speculative']!r} is not one of {', '.join(SPECULATIVE)}")
    for k in ("cache_type_k", "cache_type_v"):
        if k in strs and strs[k] not in KV_TYPE_NAMES:
            raise ConfigError(f"{where}.{k}: {strs[k]!r} is not one of {', '.join(KV_TYPE_NAMES)}")
    for k in ("chat_template", "mmproj"):
        if k in strs:
            strs[k] = _path(base, strs[k])
    if "lora" in d:
        items = _typed(where, "lora", d["lora"], (list,), "a list of adapter paths (PATH or PATH:SCALE, or {path, scale})")
        strs["lora"] = tuple(_lora_item(f"{where}.lora[{i}]", item, base) for i, item in enumerate(items))
    if "lora_models" in d:
        named = _typed(where, "lora_models", d["lora_models"], (dict,), "a mapping of model ids to adapter paths")
        strs["lora_models"] = tuple(LoraModel(str(k), _lora_item(f"{where}.lora_models.{k}", v, base)) for k, v in named.items())
    if "engine_timeout" in d:
        strs["engine_timeout"] = float(_typed(where, "engine_timeout", d["engine_timeout"], (int, float), "seconds"))
    for k in ("no_repack", "no_kv_offload", "engine_process", "embeddings"):
        if k in d:
            strs[k] = bool(_typed(where, k, d[k], (bool,), "true or false"))
    for k, parse in _PLACEMENT.items():
        if k in d:
            try:
                strs[k] = parse(d[k])
            except ValueError as exc:
                raise ConfigError(f"{where}.{k}: {exc}") from None
    model_id = d.get("id") or short_name(ref)
    inherited = {k: getattr(defaults, k) for k in _INHERITED}  # the serve flags, as defaults
    settings: dict[str, Any] = {**inherited, "model": path, "model_alias": str(model_id), **ints, **strs}
    cfg = ModelConfig(**settings)
    preload = bool(_typed(where, "preload", d.get("preload", False), (bool,), "true or false"))
    ka = _keep_alive(where, d["keep_alive"]) if "keep_alive" in d else keep_alive
    return ModelEntry(id=str(model_id), local=cfg, keep_alive=ka, preload=preload)


def _lora_item(where: str, item: Any, base: Path) -> Lora:
    if isinstance(item, str):
        spec = parse_lora(item, where)
    elif isinstance(item, dict) and set(item) <= {"path", "scale"} and isinstance(item.get("path"), str):
        scale = item.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ConfigError(f"{where}.scale: expected a number, got {scale!r}")
        spec = Lora(item["path"], float(scale))
    else:
        raise ConfigError(f"{where}: expected PATH[:SCALE] or {{path: ..., scale: ...}}, got {item!r}")
    return Lora(_path(base, spec.path), spec.scale)


def _upstream_entry(where: str, d: dict[str, Any], base: Path) -> ModelEntry:
    urls = d["url"] if isinstance(d["url"], list) and d["url"] else [d["url"]]
    for k, url in enumerate(urls):
        place = f"{where}.url" if len(urls) == 1 else f"{where}.url[{k}]"
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"{place}: {url!r} is not an http:// or https:// URL")
    if len(set(urls)) < len(urls):
        raise ConfigError(f"{where}.url: a URL is listed twice")
    api_key = d.get("api_key")
    if "api_key_env" in d:
        name = str(_typed(where, "api_key_env", d["api_key_env"], (str,), "an environment variable name"))
        api_key = os.environ.get(name)
        if api_key is None:
            raise ConfigError(f"{where}.api_key_env: the environment variable {name} is not set")
    mode = d.get("mode", "passthrough")
    if mode not in UPSTREAM_MODES:
        raise ConfigError(f"{where}.mode: {mode!r} is not one of {', '.join(UPSTREAM_MODES)}")
    guided = d.get("guided", "openai")
    if guided not in GUIDED_KINDS:
        raise ConfigError(f"{where}.guided: {guided!r} is not one of {', '.join(GUIDED_KINDS)}")
    verify = d.get("verify_tls", True)
    _typed(where, "verify_tls", verify, (bool, str), "true, false or a CA bundle path")
    if isinstance(verify, str):
        verify = _path(base, verify)
    upstream_model = d.get("upstream_model")
    model_id = d.get("id") or upstream_model
    if not model_id:
        raise ConfigError(f"{where}: an upstream model needs 'id' or 'upstream_model'")
    cfg = UpstreamConfig(
        url=urls[0],
        replicas=tuple(urls[1:]),
        api_key=None if api_key is None else str(api_key),
        upstream_model=None if upstream_model is None else str(upstream_model),
        mode=mode,
        guided=guided,
        timeout=float(_typed(where, "timeout", d.get("timeout", 600.0), (int, float), "seconds")),
        verify_tls=verify,
        chat_template=_path(base, str(d["chat_template"])) if d.get("chat_template") else None,
        tool_format=str(d.get("tool_format", "auto")),
        health_interval=float(_typed(where, "health_interval", d.get("health_interval", 5.0), (int, float), "seconds")),
    )
    return ModelEntry(id=str(model_id), upstream=cfg)


def load_models_config(path: str, defaults: ModelConfig | None = None) -> ModelsConfig:
    """Read a --config YAML file (see docs/upstreams.md): the models to serve and the memory budget.
    Relative paths in it are relative to the file. Local models take unset settings
    (ctx_size, threads, parallel, cache_ram, cache types) from `defaults`."""
    import yaml

    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'models' list")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})")
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise ConfigError(f"{path}: 'models' must be a non-empty list")
    base = file.resolve().parent
    keep_alive = _keep_alive(path, data["keep_alive"]) if "keep_alive" in data else DEFAULT_KEEP_ALIVE
    entries: list[ModelEntry] = []
    for i, raw in enumerate(models):
        where = f"{path}: models[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping")
        allowed = _UPSTREAM_KEYS if "url" in raw else _LOCAL_KEYS
        unknown = sorted(set(raw) - allowed)
        if unknown:
            kind = "an upstream" if "url" in raw else "a local"
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} for {kind} model (known: {', '.join(sorted(allowed))})")
        entry = _upstream_entry(where, raw, base) if "url" in raw else _local_entry(where, raw, base, defaults or ModelConfig(), keep_alive)
        taken = {e.id for e in entries} | {a.id for e in entries if e.local for a in e.local.lora_models}
        for new in [entry.id, *(a.id for a in (entry.local.lora_models if entry.local else ()))]:
            if new in taken:
                raise ConfigError(f"{where}: the id {new!r} is used twice")
            taken.add(new)
        entries.append(entry)
    default = data.get("default", entries[0].id)
    if default not in {e.id for e in entries}:
        raise ConfigError(f"{path}: default {default!r} is not the id of a model in the file")
    memory = data.get("memory_mb")
    if memory is not None:
        memory = int(_typed(path, "memory_mb", memory, (int,), "megabytes (an integer)"))
    mapping = data.get("model_map") or {}
    _typed(path, "model_map", mapping, (dict,), "a mapping of name patterns to model ids")
    ids = {e.id for e in entries} | {a.id for e in entries if e.local for a in e.local.lora_models}
    for pattern, target in mapping.items():
        if target not in ids:
            raise ConfigError(f"{path}: model_map.{pattern}: {target!r} is not the id of a model in the file")
    pairs = tuple((str(k), str(v)) for k, v in mapping.items())
    return ModelsConfig(models=tuple(entries), default=str(default), memory_mb=memory, model_map=pairs)


def parse_model_map(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """--model-map PATTERN=ID flags (each may hold several, comma-separated) as pairs."""
    out = []
    for item in items or []:
        for one in item.split(","):
            pattern, sep, target = one.strip().partition("=")
            if not sep or not pattern.strip() or not target.strip():
                raise ConfigError(f"--model-map {one.strip()!r}: expected PATTERN=MODEL_ID, e.g. 'claude-*=my-model'")
            out.append((pattern.strip(), target.strip()))
    return tuple(out)


def env_default(name: str, default: object) -> object:
    """The TOOLSERVE_NAME environment variable, typed like `default`, else `default`."""
    raw = os.environ.get(f"TOOLSERVE_{name.upper()}")
    if raw is None:
        return default
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    return raw


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
