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

router = APIRouter()

ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/tokenize", "/detokenize", "/metrics")


class _EngineCollector(Collector):
    """Queue depth, activity and prompt-cache counters, read from the engine when scraped."""

    def __init__(self, pipe: Pipeline):
        self.pipe = pipe

    def collect(self) -> Iterator[Any]:
        stats = self.pipe.engine.stats
        yield GaugeMetricFamily("toolserve_queue_depth", "Requests waiting for the engine", value=max(0, stats.pending - stats.active))
        yield GaugeMetricFamily("toolserve_active_requests", "Generations running now", value=stats.active)
        cache = getattr(self.pipe.engine, "cache", None)
        if cache is not None:
            for name in ("hits", "misses", "restores", "evictions"):
                yield CounterMetricFamily(f"toolserve_prompt_cache_{name}", f"Prompt cache {name}", value=getattr(cache.stats, name))
            yield GaugeMetricFamily("toolserve_prompt_cache_bytes", "Bytes of KV snapshots held", value=cache.stats.bytes)


class Metrics:
    def __init__(self, pipe: Pipeline):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("toolserve_requests", "HTTP requests by route and status", ["route", "status"], registry=r)
        self.prompt_tokens = Counter("toolserve_prompt_tokens", "Prompt tokens read", registry=r)
        self.cached_tokens = Counter("toolserve_cached_prompt_tokens", "Prompt tokens reused from the cache", registry=r)
        self.completion_tokens = Counter("toolserve_completion_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(
            "toolserve_time_to_first_token_seconds", "Time to first token", registry=r,
            buckets=(0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.tpot = Histogram(
            "toolserve_time_per_output_token_seconds", "Time per generated token after the first", registry=r,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1),
        )
        r.register(_EngineCollector(pipe))
        pipe.observers.append(self.observe)

    def observe(self, done: Finish) -> None:
        u = done.usage
        self.prompt_tokens.inc(u.prompt_tokens)
        self.cached_tokens.inc(u.cached_tokens)
        self.completion_tokens.inc(u.completion_tokens)
        if done.ttft is not None:
            self.ttft.observe(done.ttft)
        if u.completion_tokens > 1:
            self.tpot.observe(done.decode_time / (u.completion_tokens - 1))

    def count_request(self, path: str, status: int) -> None:
        route = path if path in ROUTES or path.startswith("/v1/models/") else "other"
        route = "/v1/models/{id}" if route.startswith("/v1/models/") else route
        self.requests.labels(route, str(status)).inc()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
