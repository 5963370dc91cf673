"""What the registry holds: a local model, loaded or not, with its state and status
(`LocalModel`), and what the registry needs from a model another server serves
(`UpstreamModel`, implemented in toolserve.upstream)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolserve.config import ModelConfig
from toolserve.errors import ToolserveError
from toolserve.serving.memory import MB
from toolserve.serving.pipeline import Pipeline


class UpstreamModel(Protocol):
    """What the registry needs from a model served by another server (toolserve.upstream)."""

    kind: str  # "upstream"
    in_flight: int

    @property
    def model_id(self) -> str | None:
        """Our id; None while the upstream's model is not known yet (not reached so far)."""
        ...

    def unavailable(self) -> ToolserveError:
        """The error for a request that cannot be served now."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def drain(self, grace: float) -> None: ...

    def status(self) -> dict[str, Any]: ...


@dataclass(eq=False)
class LocalModel:
    """A GGUF model that may or may not be loaded right now."""

    id: str
    cfg: ModelConfig
    keep_alive: float | None = None  # idle seconds before unloading; None: stays loaded
    # the last request's own keep_alive (Ollama's), in force until another request sets one:
    # None: none asked, `keep_alive` applies; math.inf: stays loaded
    asked_keep_alive: float | None = None
    preload: bool = False
    estimate: int = 0  # bytes (memory_estimate); 0 when no budget is set
    pipeline: Pipeline | None = None
    state: str = "unloaded"  # unloaded | loading | loaded | unloading
    loads: int = 0
    reloadable: bool = True  # False: handed over loaded, without a config to load it again
    holds: int = 0  # requests preparing (e.g. decoding images) before they are admitted
    last_error: str | None = None
    loaded_at: float | None = None
    base: LocalModel | None = None  # a --lora-model id: the model whose engine it runs on
    facts: Any = None  # serving.facts.Facts, read once for /v1/models (False: the file could not be read)
    created: int = field(default_factory=lambda: int(time.time()))
    kind: str = field(default="local", init=False)
    _task: asyncio.Future[None] | None = field(default=None, repr=False)  # the load or unload under way

    @property
    def model_id(self) -> str:
        return self.id

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other names requests may use for this model: the reference it was started with
        (`owner/repo:Q4_K_M`, `ollama:qwen3:0.6b`), so `model` may repeat what `--model` said."""
        origin = self.cfg.origin
        return (origin.reference,) if origin is not None and self.base is None and origin.reference != self.id else ()

    @property
    def in_flight(self) -> int:
        """Requests in flight; a base model counts those of its adapter ids too (they hold its engine)."""
        if self.pipeline is None:
            return 0
        return self.pipeline.in_flight if self.base is not None else self.pipeline.family_in_flight

    @property
    def idle_limit(self) -> float | None:
        """Idle seconds before the reaper unloads it (None: never)."""
        limit = self.asked_keep_alive if self.asked_keep_alive is not None else self.keep_alive
        return None if limit is None or math.isinf(limit) else limit

    @property
    def busy(self) -> bool:
        """Requests in flight, or being prepared (between the load and their admission)."""
        return self.in_flight > 0 or self.holds > 0

    @property
    def last_used(self) -> float:
        if self.pipeline is None:
            return 0.0
        family = [self.pipeline] if self.base is not None else self.pipeline._family
        return max(p.last_used for p in family)

    def status(self) -> dict[str, Any]:
        if self.base is not None:
            return {**self.base.status(), "in_flight": self.in_flight, "base": self.base.id}
        out: dict[str, Any] = {
            "state": self.state,
            "loaded": self.state == "loaded",
            "in_flight": self.in_flight,
            "keep_alive": self.keep_alive,
            "memory_estimate_mb": round(self.estimate / MB) if self.estimate else None,
            "loads": self.loads,
        }
        limit = self.idle_limit
        if self.state == "loaded" and limit is not None and not self.busy:
            out["unloads_in"] = round(max(0.0, limit - (time.monotonic() - self.last_used)), 1)
        if self.last_error:
            out["last_error"] = self.last_error
        health = getattr(self.pipeline.engine, "health", None) if self.pipeline is not None else None
        if health is not None:  # an engine process: its restarts, and why it failed if it did
            out["engine"] = health()
            if out["engine"]["failed"]:
                out["state"], out["loaded"] = "failed", False
        return out


Entry = LocalModel | UpstreamModel
