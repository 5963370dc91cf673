"""Typed settings. Every CLI flag of `toolserve serve` has a TOOLSERVE_* environment twin."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

KV_TYPE_NAMES = ("f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")


@dataclass(frozen=True)
class ModelConfig:
    model: str | None = None  # GGUF path; None: the bundled SmolLM2
    model_alias: str | None = None  # id in /v1/models; None: the file's stem
    ctx_size: int = 4096
    threads: int | None = None  # None: all cores (llama-cpp-python's default is half); shared by the instances
    parallel: int = 1  # model instances, each with its own context, worker thread and share of the cache
    chat_template: str | None = None  # Jinja file overriding the model's template
    tool_format: str = "auto"  # a format id from formats/registry.py, or auto-detect
    cache_ram: int = 512  # MB of RAM for prompt-cache snapshots; 0 turns prefix reuse off
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"
    api_key: str | None = None  # also TOOLSERVE_API_KEY
    cors_origins: str | None = None  # comma-separated; None: localhost pages only
    max_body_mb: int = 8
    shutdown_grace: float = 10.0


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
