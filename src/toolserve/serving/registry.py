"""Several models behind one server: routing by `model`, local models loaded on first use and
unloaded when idle, within a memory budget; upstream models are held here as opaque backends.

Everything here runs on the event loop; loading and unloading run in a thread. One load runs
at a time (so the budget is decided on settled numbers); requests that want a model being
loaded wait for that same load.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence

from toolserve.config import ModelConfig
from toolserve.errors import InsufficientMemory, InvalidRequest, ModelBusy, ModelNotFound, ShuttingDown, ToolserveError
from toolserve.serving.entries import Entry, LocalModel, UpstreamModel
from toolserve.serving.loader import load_pipeline
from toolserve.serving.memory import MB, memory_estimate
from toolserve.serving.pipeline import Limits, Pipeline

log = logging.getLogger(__name__)

Loader = Callable[[ModelConfig, Limits], Pipeline]


class ModelRegistry:
    def __init__(
        self,
        local: Sequence[LocalModel] = (),
        upstream: Sequence[UpstreamModel] = (),
        *,
        default: str | None = None,
        memory_mb: int | None = None,
        limits: Limits | None = None,
        loader: Loader | None = None,
        reap_interval: float = 1.0,
        model_map: Sequence[tuple[str, str]] = (),
    ):
        self.entries: list[Entry] = [*local, *upstream]
        # (pattern, id): requested names (fnmatch patterns, e.g. 'claude-*') served by model `id`
        self.model_map = list(model_map)
        if not self.entries:
            raise ValueError("a registry needs at least one model")
        self.local = list(local)
        self.upstream = list(upstream)
        self.default = default
        self.budget = memory_mb * MB if memory_mb is not None else None
        self.limits = limits or Limits()
        self._loader = loader
        self._reap_interval = reap_interval
        self._lock = asyncio.Lock()  # one load at a time
        self._reaper: asyncio.Task[None] | None = None
        self._load_hooks: list[Callable[[str, Pipeline], None]] = []
        self.closing = False
        # --lora-model ids: entries of their own, whose pipeline is a variant of their base's
        self.adapters: list[LocalModel] = []
        for m in self.local:
            for a in m.cfg.lora_models:
                entry = LocalModel(a.id, m.cfg, keep_alive=m.keep_alive, base=m, reloadable=m.reloadable)
                self.adapters.append(entry)
                self.entries.insert(self.entries.index(m) + len(self.adapters_of(m)), entry)
            self._attach(m)
        for m in self.local:
            if m.state == "unloaded" and not m.estimate:
                m.estimate = memory_estimate(m.cfg)  # also checks, at start, that the file is a GGUF
            if self.budget is not None and m.estimate > self.budget:
                raise InsufficientMemory(
                    f"model '{m.id}' needs about {m.estimate / MB:.0f} MB (file, KV cache, prompt cache), "
                    f"more than the memory budget of {self.budget // MB} MB"
                )

    def adapters_of(self, m: LocalModel) -> list[LocalModel]:
        return [a for a in self.adapters if a.base is m]

    def _attach(self, m: LocalModel) -> None:
        """Make `m`'s adapter ids follow its state: loaded on its engine, or not loaded."""
        for a in self.adapters_of(m):
            if m.pipeline is not None and m.state == "loaded":
                a.pipeline, a.state, a.loaded_at, a.loads = m.pipeline.variant(a.id), "loaded", m.loaded_at, m.loads
                for hook in self._load_hooks:
                    hook(a.id, a.pipeline)
            else:
                a.pipeline, a.state, a.loaded_at = None, m.state, None

    @classmethod
    def single(cls, pipeline: Pipeline, cfg: ModelConfig | None = None) -> ModelRegistry:
        """One local model, loaded already and never unloaded when idle (`toolserve serve`
        without --config). With its `cfg`, an explicit unload frees it and the next request
        loads it again; without, it cannot be unloaded."""
        m = LocalModel(
            pipeline.model_id, cfg or ModelConfig(), pipeline=pipeline, state="loaded", loads=1,
            loaded_at=time.time(), reloadable=cfg is not None,
        )
        return cls([m], default=m.id, limits=pipeline.limits)

    # -- routing -------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        return [e.model_id for e in self.entries if e.model_id is not None]

    def default_entry(self) -> Entry:
        if self.default is not None:
            for e in self.entries:
                if e.model_id == self.default:
                    return e
        return self.entries[0]

    def resolve(self, name: str | None) -> Entry:
        """The model a request names (none: the default one); 404 naming the known ids."""
        if not name:
            return self.default_entry()
        for e in self.entries:
            if e.model_id == name:
                return e
        for m in self.local:
            if name in m.aliases:
                return m
        for pattern, target in self.model_map:
            if fnmatch.fnmatchcase(name, pattern):
                mapped = next((e for e in self.entries if e.model_id == target), None)
                if mapped is None:
                    raise ModelNotFound(f"The model '{name}' is mapped to '{target}', which is not served here.", param="model")
                return mapped
        for e in self.upstream:
            if e.model_id is None:  # an upstream not reached yet may serve it: say that instead
                raise e.unavailable()
        known = ", ".join(f"'{i}'" for i in self.ids())
        first = self.ids()[0] if self.ids() else "ID"
        raise ModelNotFound(
            f"The model '{name}' does not exist; this server serves {known}. To serve other names with one of "
            f"them, start it with --model-map '{name.split('-')[0]}-*={first}' (models.yaml: model_map).",
            param="model",
        )

    def find(self, model_id: str) -> Entry:
        for e in self.entries:
            if e.model_id == model_id:
                return e
        known = ", ".join(f"'{i}'" for i in self.ids())
        raise ModelNotFound(f"The model '{model_id}' does not exist; this server serves {known}.", param="model")

    def loaded(self) -> list[LocalModel]:
        return [m for m in self.local if m.state == "loaded" and m.pipeline is not None]

    def on_load(self, hook: Callable[[str, Pipeline], None]) -> None:
        """Call `hook(id, pipeline)` for every model loaded from now on, and those loaded now."""
        self._load_hooks.append(hook)
        for m in [*self.loaded(), *self.adapters]:
            if m.state == "loaded" and m.pipeline is not None:
                hook(m.id, m.pipeline)

    # -- loading -------------------------------------------------------------------------------
    async def pipeline(self, m: LocalModel) -> Pipeline:
        """The model's pipeline, loading it first if needed (shared by concurrent requests)."""
        if m.base is not None:
            await self.pipeline(m.base)  # loading the base attaches its adapter ids
            if m.pipeline is None:
                raise ModelNotFound(f"The model '{m.id}' is not available now: its base '{m.base.id}' was unloaded.", param="model")
            return m.pipeline
        while True:
            if m.state == "loaded" and m.pipeline is not None:
                return m.pipeline
            if m._task is None:
                m._task = asyncio.ensure_future(self._load(m))
            # shielded: a request that goes away does not cancel a load others wait for
            await asyncio.shield(m._task)

    @contextlib.asynccontextmanager
    async def hold(self, m: LocalModel) -> AsyncIterator[Pipeline]:
        """The model's pipeline (loaded first if needed), kept from being unloaded while a
        request prepares; once admitted, its ticket keeps it busy."""
        pipe = await self.pipeline(m)
        held = m.base or m  # an adapter id holds its base's engine
        held.holds += 1
        try:
            yield pipe
        finally:
            held.holds -= 1

    async def _load(self, m: LocalModel) -> None:
        try:
            async with self._lock:
                if self.closing:
                    raise ShuttingDown("The server is shutting down; retry on another instance or later.")
                m.state = "loading"
                await self._make_room(m)
                loader = self._loader or load_pipeline
                started = time.perf_counter()
                pipe = await asyncio.to_thread(loader, m.cfg, self.limits)
        except BaseException as exc:
            m.state = "unloaded"
            m.last_error = exc.message if isinstance(exc, ToolserveError) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            m._task = None
        m.pipeline, m.state, m.last_error, m.loaded_at = pipe, "loaded", None, time.time()
        m.loads += 1
        log.info("model %s loaded in %.2f s", m.id, time.perf_counter() - started)
        for hook in self._load_hooks:
            hook(m.id, pipe)
        self._attach(m)

    async def _make_room(self, m: LocalModel) -> None:
        """Unload idle models, least recently used first, until `m` fits the budget."""
        if self.budget is None:
            return
        while True:
            others = [o for o in self.local if o is not m and o.state != "unloaded"]
            idle = sorted((o for o in others if o.state == "loaded" and not o.busy), key=lambda o: o.last_used)
            if sum(o.estimate for o in others) + m.estimate <= self.budget or not idle:
                break
            victim = idle[0]  # checked just now: no await since
            log.info("unloading %s (idle) to make room for %s within the memory budget", victim.id, m.id)
            await self._begin_unload(victim)
        pending = [o for o in others if o.state == "unloading" and o._task is not None]
        for o in pending:  # being unloaded by someone else: their memory comes back soon
            with contextlib.suppress(Exception):
                await o._task  # type: ignore[misc]
        used = sum(o.estimate for o in self.local if o is not m and o.state != "unloaded")
        if used + m.estimate > self.budget:
            busy = ", ".join(f"'{o.id}'" for o in self.local if o is not m and o.state != "unloaded")
            raise InsufficientMemory(
                f"Model '{m.id}' needs about {m.estimate / MB:.0f} MB, but {used / MB:.0f} MB of the "
                f"{self.budget // MB} MB memory budget are held by models with requests in flight ({busy}). Retry later.",
                retry_after=5,
            )

    # -- unloading -----------------------------------------------------------------------------
    def _begin_unload(self, m: LocalModel) -> asyncio.Future[None]:
        pipe = m.pipeline
        m.state, m.pipeline = "unloading", None
        self._attach(m)

        async def close() -> None:
            try:
                if pipe is not None:
                    await asyncio.to_thread(pipe.engine.close)
            finally:
                m.state, m._task, m.loaded_at = "unloaded", None, None
                self._attach(m)
                log.info("model %s unloaded", m.id)

        m._task = asyncio.ensure_future(close())
        return m._task

    async def unload(self, model_id: str) -> LocalModel:
        """POST /v1/models/{id}/unload: free a local model now (409 while it serves requests)."""
        m = self.find(model_id)
        if not isinstance(m, LocalModel):
            raise InvalidRequest(f"The model '{model_id}' is served by an upstream server; there is nothing to unload here.", param="model")
        if m.base is not None:
            raise InvalidRequest(
                f"The model '{model_id}' is a LoRA adapter on '{m.base.id}', whose weights it shares; unload '{m.base.id}'.", param="model"
            )
        if not m.reloadable:
            raise InvalidRequest(f"The model '{model_id}' cannot be unloaded: this server could not load it again.", param="model")
        if m.state == "loading" and m._task is not None:
            raise ModelBusy(f"The model '{model_id}' is loading; unload it once it is loaded.")
        if m.busy:
            raise ModelBusy(f"The model '{model_id}' has {m.in_flight} request(s) in flight; unload it when they are done.")
        if m.state == "loaded":
            await self._begin_unload(m)
        elif m.state == "unloading" and m._task is not None:
            await m._task
        return m

    def keep_alive_for(self, m: LocalModel, seconds: float | None) -> None:
        """A request's own keep_alive (Ollama's): how long `m` stays loaded once idle, from now
        until another request sets one (None: the configured one again; math.inf: forever).
        A model that could not be loaded again keeps its own."""
        held = m.base or m  # an adapter id's base holds the weights
        if held.reloadable:
            held.asked_keep_alive = seconds

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(self._reap_interval)
            now = time.monotonic()
            for m in self.local:
                limit = m.idle_limit
                if m.state == "loaded" and limit is not None and not m.busy and now - m.last_used >= limit:
                    log.info("model %s idle for %.0f s (keep_alive %g s): unloading", m.id, now - m.last_used, limit)
                    self._begin_unload(m)

    # -- life cycle ----------------------------------------------------------------------------
    def preload(self) -> None:
        """Load the models marked `preload` now, before serving (a failure stops the start)."""
        wanted = [m for m in self.local if m.preload and m.state == "unloaded"]
        if self.budget is not None and sum(m.estimate for m in wanted) > self.budget:
            raise InsufficientMemory(
                f"the preloaded models need about {sum(m.estimate for m in wanted) / MB:.0f} MB together, "
                f"more than the memory budget of {self.budget // MB} MB"
            )
        loader = self._loader or load_pipeline
        for m in wanted:
            m.pipeline, m.state, m.loaded_at = loader(m.cfg, self.limits), "loaded", time.time()
            m.loads += 1
            self._attach(m)

    async def start(self) -> None:
        """Check the upstreams and start their health checks; start the idle reaper.
        Runs in the app's lifespan, before the first request."""
        for u in self.upstream:
            await u.start()
        if any(m.reloadable for m in self.local):  # also for a request's own keep_alive (Ollama's)
            self._reaper = asyncio.create_task(self._reap())

    async def stop(self) -> None:
        """Stop background work and close the upstream clients (the engines: `close`)."""
        self.closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for u in self.upstream:
            await u.close()

    def drain(self, grace: float) -> None:
        self.closing = True
        for m in self.loaded():
            assert m.pipeline is not None
            m.pipeline.drain(grace)
        for u in self.upstream:
            u.drain(grace)

    def close(self) -> None:
        """Free every loaded engine (after the server stopped)."""
        for m in self.local:
            if m.pipeline is not None:
                m.pipeline.engine.close()
                m.pipeline, m.state = None, "unloaded"
                self._attach(m)
