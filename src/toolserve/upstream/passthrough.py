"""Passthrough mode: the upstream's own /v1/chat/completions (it renders and parses tools
itself, e.g. vLLM with --enable-auto-tool-choice); toolserve repairs the tool-call deltas
(upstream/repair.py) and renames the model. /v1/completions is forwarded in both modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from toolserve.serving.pipeline import Finish
from toolserve.types import Usage
from toolserve.upstream.client import UpstreamBackend
from toolserve.upstream.repair import StreamRepair, repair_response

Json = dict[str, Any]


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    try:
        return Usage(int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0), int(cached or 0))
    except (TypeError, ValueError):
        return None


class Relay:
    """The chunks of an open upstream stream. `aclose` ends the upstream request even when the
    client went away before the first chunk was read (an unstarted generator closes nothing)."""

    def __init__(self, chunks: AsyncIterator[Json], resp: httpx.Response):
        self._chunks, self._resp = chunks, resp

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> Json:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]
        await self._resp.aclose()


class Forwarding(UpstreamBackend):
    """Sends a client's body on with the model renamed, and renames it back in what returns."""

    def _ours(self, obj: Json) -> Json:
        if "model" in obj:
            obj = {**obj, "model": self.model_id}
        return obj

    def _observe_usage(self, obj: Json) -> None:
        usage = _usage(obj.get("usage"))
        if usage is not None:
            reasons = [c.get("finish_reason") for c in obj.get("choices") or [] if isinstance(c, dict)]
            self.observe(Finish(next((r for r in reasons if r), "stop"), usage))

    async def forward(self, path: str, body: Json) -> Json:
        """A non-streaming request: the upstream's body, model renamed (repaired for chat)."""
        resp = await self.client.open(path, self.upstream_body(body))
        data = await self.client.read_json(resp)
        if path.endswith("/chat/completions"):
            data = repair_response(data)
        self._observe_usage(data)
        return self._ours(data)

    async def forward_stream(self, path: str, body: Json) -> Relay:
        """A streaming request, opened now (so an upstream error is a proper status), read as
        the client reads the returned iterator."""
        resp = await self.client.open(path, self.upstream_body(body))
        return Relay(self._relay(resp, StreamRepair() if path.endswith("/chat/completions") else None), resp)

    async def _relay(self, resp: httpx.Response, repair: StreamRepair | None) -> AsyncIterator[Json]:
        try:
            async for chunk in self.client.sse(resp):
                self._observe_usage(chunk)
                for out in repair.feed(chunk) if repair is not None else [chunk]:
                    yield self._ours(out)
            for out in repair.finish() if repair is not None else []:
                yield self._ours(out)
        finally:
            await resp.aclose()


class Passthrough(Forwarding):
    mode = "passthrough"
