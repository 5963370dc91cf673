"""What both upstream modes share: our id for the model, admission, health, the /v1/models card;
the requests go through the model's pool of upstreams (pool.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

from toolserve.config import UpstreamConfig
from toolserve.errors import ShuttingDown, ToolserveError
from toolserve.serving.pipeline import Finish, Limits, Ticket
from toolserve.upstream.client import root_url, safe_url
from toolserve.upstream.pool import UpstreamPool

log = logging.getLogger(__name__)


class UpstreamBackend:
    """What both modes share: our id, admission, health, the /v1/models card."""

    kind = "upstream"
    mode = "passthrough"

    def __init__(self, cfg: UpstreamConfig, alias: str | None = None, limits: Limits | None = None):
        self.cfg = cfg
        self.alias = alias
        self.limits = limits or Limits()
        self.client = UpstreamPool(cfg, name=lambda: self.model_id or safe_url(cfg.url))
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.created = int(time.time())
        self.observers: list[Any] = []  # callables taking a Finish (metrics)
        self._closing = False
        digest = hashlib.sha256(f"{root_url(cfg.url)}:{cfg.upstream_model}:{cfg.mode}".encode()).hexdigest()
        self.fingerprint = f"fp_{digest[:10]}"

    @property
    def upstream_model(self) -> str | None:
        """The upstream's name of the model: configured, else the first one it lists."""
        if self.cfg.upstream_model:
            return self.cfg.upstream_model
        return str(self.client.models[0]["id"]) if self.client.models else None

    @property
    def model_id(self) -> str | None:
        return self.alias or self.upstream_model

    @property
    def available(self) -> bool:
        return self.client.healthy is not False

    def unavailable(self) -> ToolserveError:
        return self.client.unavailable()

    def admit(self) -> Ticket:
        if self._closing:
            raise ShuttingDown("The server is shutting down; retry on another instance or later.")
        self.client.require()
        self.in_flight += 1
        return Ticket(self)

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        out = dict(body)
        name = self.upstream_model
        if name is None:
            out.pop("model", None)  # the upstream's own default
        else:
            out["model"] = name
        return out

    def observe(self, done: Finish) -> None:
        for fn in self.observers:
            fn(done)

    async def start(self) -> None:
        await self.client.start()
        if self.model_id is None:
            log.warning("upstream %s: its model is not known yet (it has not answered)", safe_url(self.cfg.url))

    async def close(self) -> None:
        await self.client.close()

    def drain(self, grace: float) -> None:
        self._closing = True
        asyncio.get_running_loop().call_later(grace, self.client.abort_all)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": "upstream",
            "mode": self.mode,
            "available": self.available,
            "loaded": self.client.healthy is True,
            "in_flight": self.in_flight,
            "upstream_model": self.upstream_model,
        }
        if self.client.error:
            out["error"] = self.client.error
        if len(self.client.clients) > 1:
            out["upstreams"] = self.client.status()
        return out

    def card(self) -> dict[str, Any]:
        theirs = next((m for m in self.client.models if m.get("id") == self.upstream_model), {})
        card: dict[str, Any] = {
            "id": self.model_id,
            "object": "model",
            "created": theirs.get("created", self.created),
            "owned_by": theirs.get("owned_by", "upstream"),
        }
        if isinstance(theirs.get("max_model_len"), int):
            card["max_model_len"] = theirs["max_model_len"]
        card["toolserve"] = {
            **self.status(),
            "url": safe_url(self.cfg.url),
            "timeout": self.cfg.timeout,
            "verify_tls": self.cfg.verify_tls is not False,
            **self.extra_card(),
        }
        return card

    def extra_card(self) -> dict[str, Any]:
        return {}
