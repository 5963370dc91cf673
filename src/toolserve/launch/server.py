"""The server an agent talks to: one that launch starts for it (and stops after), or one already
running at --url, checked before the agent starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from toolserve.errors import ToolserveError


@dataclass(frozen=True)
class ModelInfo:
    id: str  # the id the server will give it
    trained: int | None  # n_ctx_train, from the GGUF's header
    own_sampling: bool  # the model brings a temperature (its GGUF, its Ollama parameters, its card)


def local_model(ref: str | None, *, offline: bool = False, token: str | None = None) -> ModelInfo:
    """What launch needs to know before starting a server on `ref` (None: the bundled model); a
    reference is fetched now, so `serve` finds it on disk."""
    from toolserve.config import ModelConfig
    from toolserve.models.files import gguf_metadata, resolve_model
    from toolserve.models.resolve import resolve_config
    from toolserve.models.sampling import PROTOCOL_SOURCE
    from toolserve.serving.loader import adapter_label, sampling_defaults

    cfg = resolve_config(ModelConfig(model=ref), offline=offline, token=token)
    path = resolve_model(cfg.model)
    meta = gguf_metadata(path)
    trained = meta.get(f"{meta.get('general.architecture')}.context_length")
    temperature = sampling_defaults(cfg, path, {}, meta)["temperature"]
    return ModelInfo(adapter_label(cfg, path), trained if isinstance(trained, int) else None, temperature.source != PROTOCOL_SOURCE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def remote_model(url: str, api_key: str | None, want: str | None) -> tuple[str, int | None]:
    """The model to use on the server at `url` (`want`, else the first it lists) and the context
    it gives a request (None when it does not say)."""
    try:
        health = httpx.get(f"{url}/health", timeout=10)
        listed = httpx.get(f"{url}/v1/models", headers=_headers(api_key), timeout=30)
    except httpx.HTTPError as exc:
        raise ToolserveError(f"nothing answers at {url} ({exc}): start `toolserve serve` there, or leave out --url and launch starts one") from None
    if health.status_code != 200:
        raise ToolserveError(f"{url}/health says {health.status_code}: the server is not ready ({health.text[:200]})")
    if listed.status_code in (401, 403):
        raise ToolserveError(f"{url} wants an API key: pass --api-key (or set TOOLSERVE_API_KEY)")
    if listed.status_code != 200:
        raise ToolserveError(f"{url}/v1/models says {listed.status_code}: {listed.text[:200]}")
    cards: list[dict[str, Any]] = listed.json().get("data", [])
    ids = [c.get("id") for c in cards]
    card = next((c for c in cards if c.get("id") == want), None) if want else (cards[0] if cards else None)
    if card is None:
        raise ToolserveError(f"{url} serves {', '.join(map(str, ids)) or 'no model'}" + (f", not {want}" if want else ""))
    ctx = card.get("max_model_len") or card.get("toolserve", {}).get("n_ctx")
    return str(card["id"]), int(ctx) if isinstance(ctx, int) else None


class Started:
    """`toolserve serve` in a session of its own, so the Ctrl-C that the agent reads (Claude
    Code interrupts a turn with it) never reaches the server; its output goes to `log`."""

    def __init__(self, args: list[str], url: str, log: Path, env: dict[str, str]):
        self.url, self.log = url, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolserve.cli", "serve", *args], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )

    def wait_ready(self, timeout: float = 900.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ToolserveError(f"the server exited ({self.proc.returncode}); the end of {self.log}:\n{self._tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ToolserveError(f"the server did not start in {timeout:.0f} s; see {self.log}")

    def _tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-15:])

    def stop(self) -> None:
        """SIGTERM (running requests get the server's grace period), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
