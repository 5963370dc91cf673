"""GET /metrics in Prometheus text format (prometheus-client), one registry per app."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from toolserve.serving.pipeline import Finish, Pipeline
from toolserve.serving.registry import ModelRegistry

router = APIRouter()

ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/tokenize", "/detokenize", "/metrics")


class _EngineCollector(Collector):
    """Per model: queue depth, activity, prompt-cache and speculative-decoding counters read from the engine when
    scraped, whether it is loaded (local) or its upstream is up."""

    def __init__(self, models: ModelRegistry):
        self.models = models

    def collect(self) -> Iterator[Any]:
        label = ["model"]
        queue = GaugeMetricFamily("toolserve_queue_depth", "Requests waiting for the engine", labels=label)
        active = GaugeMetricFamily("toolserve_active_requests", "Generations running now", labels=label)
        loaded = GaugeMetricFamily("toolserve_model_loaded", "1: loaded (local) or its upstream answers (upstream)", labels=label)
        in_flight = GaugeMetricFamily("toolserve_in_flight_requests", "Requests admitted and not over", labels=label)
        cache_counters = {
            name: CounterMetricFamily(f"toolserve_prompt_cache_{name}", f"Prompt cache {name}", labels=label)
            for name in ("hits", "misses", "restores", "evictions")
        }
        cache_bytes = GaugeMetricFamily("toolserve_prompt_cache_bytes", "Bytes of KV snapshots held", labels=label)
        drafted = CounterMetricFamily("toolserve_speculative_drafted_tokens", "Draft tokens verified (speculative decoding)", labels=label)
        accepted = CounterMetricFamily("toolserve_speculative_accepted_tokens", "Draft tokens the model agreed with", labels=label)
        for m in self.models.local:
            loaded.add_metric([m.id], 1 if m.state == "loaded" else 0)
            in_flight.add_metric([m.id], m.in_flight)
            pipe = m.pipeline
            if pipe is None:
                continue
            stats = pipe.engine.stats
            queue.add_metric([m.id], max(0, stats.pending - stats.active))
            active.add_metric([m.id], stats.active)
            drafted.add_metric([m.id], stats.drafted_tokens)
            accepted.add_metric([m.id], stats.accepted_tokens)
            cache = getattr(pipe.engine, "cache", None)
            if cache is not None:
                for name, family in cache_counters.items():
                    family.add_metric([m.id], getattr(cache.stats, name))
                cache_bytes.add_metric([m.id], cache.stats.bytes)
        for u in self.models.upstream:
            if u.model_id is not None:
                loaded.add_metric([u.model_id], 1 if u.status().get("loaded") else 0)
                in_flight.add_metric([u.model_id], u.in_flight)
        yield from (queue, active, loaded, in_flight, *cache_counters.values(), cache_bytes, drafted, accepted)


class Metrics:
    def __init__(self, models: ModelRegistry):
        self.registry = CollectorRegistry()
        r = self.registry
        label = ["model"]
        self.requests = Counter("toolserve_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.prompt_tokens = Counter("toolserve_prompt_tokens", "Prompt tokens read", label, registry=r)
        self.cached_tokens = Counter("toolserve_cached_prompt_tokens", "Prompt tokens reused from the cache", label, registry=r)
        self.completion_tokens = Counter("toolserve_completion_tokens", "Tokens generated", label, registry=r)
        self.ttft = Histogram(
            "toolserve_time_to_first_token_seconds", "Time to first token", label, registry=r,
            buckets=(0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.tpot = Histogram(
            "toolserve_time_per_output_token_seconds", "Time per generated token after the first", label, registry=r,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1),
        )
        r.register(_EngineCollector(models))
        models.on_load(self._watch)
        for u in models.upstream:
            observers = getattr(u, "observers", None)
            if observers is not None:
                observers.append(lambda done, u=u: self.observe(u.model_id or "unknown", done))

    def _watch(self, model_id: str, pipe: Pipeline) -> None:
        pipe.observers.append(lambda done: self.observe(model_id, done))

    def observe(self, model_id: str, done: Finish) -> None:
        u = done.usage
        self.prompt_tokens.labels(model_id).inc(u.prompt_tokens)
        self.cached_tokens.labels(model_id).inc(u.cached_tokens)
        self.completion_tokens.labels(model_id).inc(u.completion_tokens)
        if done.ttft is not None:
            self.ttft.labels(model_id).observe(done.ttft)
        if u.completion_tokens > 1:
            self.tpot.labels(model_id).observe(done.decode_time / (u.completion_tokens - 1))

    def count_request(self, path: str, status: int) -> None:
        route = path if path in ROUTES or path.startswith("/v1/models/") else "other"
        if route.startswith("/v1/models/"):
            route = "/v1/models/{id}/unload" if route.endswith("/unload") else "/v1/models/{id}"
        self.requests.labels(route, str(status)).inc()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
