"""The engine in its own process (engine/remote.py, engine/worker.py): real native faults, made
on demand through the test-only POST /debug/engine-fault (TOOLSERVE_TEST_FAULTS=1), end the
requests in flight on all three protocols with a 503 engine_unavailable naming the cause; the
server keeps serving, the next request answers as before, and no engine process outlives it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from tests.conftest import CTX_SIZE, Server, free_port, toolserve_command

FAULTS = {"TOOLSERVE_TEST_FAULTS": "1"}
HANG_TIMEOUT = 20  # --engine-timeout of the servers here: a hung engine is killed after this (not less: a loaded 2-core machine can stall a decode for seconds)
LONG = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}], "max_tokens": 400, "temperature": 0}
SHORT = {"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 24, "temperature": 0}
CAUSES = {
    "segv": "was killed by SIGSEGV",
    "abort": "was killed by SIGABRT",
    "exit": "exited with status 3",
    "hang": f"hung (no engine step for {HANG_TIMEOUT} s",
    "kill": "was killed by SIGKILL (as the out-of-memory killer does;",
}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too: only its parent's wait is missing
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def engine_pid(url: str, model: str | None = None) -> int:
    body = httpx.get(f"{url}/health", timeout=30).json()
    stats = body["toolserve"] if model is None else body["models"][model]
    return int(stats["engine"]["pid"])


def answer(url: str, body: dict[str, Any] = SHORT, model: str | None = None) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={**body, **({"model": model} if model else {})}, timeout=120)


def wait_ready(url: str, old_pid: int, model: str | None = None) -> int:
    """The new engine process's pid, once the old one is replaced (restarts take a second or two)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            pid = engine_pid(url, model)
            if pid != old_pid and alive(pid):
                return pid
        except (httpx.HTTPError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError("the engine process was not restarted")


class Streams:
    """One streamed request of each protocol, read in threads; `started` once each has sent a token."""

    BODIES: ClassVar[dict[str, dict[str, Any]]] = {
        "/v1/chat/completions": {**LONG, "stream": True},
        "/v1/responses": {"input": LONG["messages"][0]["content"], "max_output_tokens": 400, "temperature": 0, "stream": True},
        "/v1/messages": {"max_tokens": 400, "temperature": 0, "messages": LONG["messages"], "stream": True},
    }

    def __init__(self, url: str):
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        self.bodies = {path: {**body, "model": model} for path, body in self.BODIES.items()}
        self.text: dict[str, str] = {}
        self.first = {path: threading.Event() for path in self.BODIES}
        self.threads = [threading.Thread(target=self._read, args=(url, path)) for path in self.BODIES]
        for t in self.threads:
            t.start()

    def _read(self, url: str, path: str) -> None:
        out = []
        headers = {"x-api-key": "unused", "anthropic-version": "2023-06-01"}
        with httpx.stream("POST", f"{url}{path}", json=self.bodies[path], headers=headers, timeout=120) as r:
            for line in r.iter_lines():
                out.append(line)
                if "delta" in line and ("text" in line or "content" in line):
                    self.first[path].set()
        self.text[path] = "\n".join(out)
        self.first[path].set()

    def wait_started(self) -> None:
        for path, event in self.first.items():
            assert event.wait(120)
            assert path not in self.text, f"{path} ended before the fault: {self.text[path][-500:]}"

    def join(self) -> dict[str, str]:
        for t in self.threads:
            t.join(180)
        return self.text


@pytest.fixture(scope="module")
def faulty() -> Iterator[Server]:
    srv = Server(["--ctx-size", str(CTX_SIZE), "--parallel", "3", "--engine-timeout", str(HANG_TIMEOUT)], env=FAULTS)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def before(faulty: Server) -> str:
    r = answer(faulty.url)
    assert r.status_code == 200
    return str(r.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize("kind", list(CAUSES))
def test_a_fault_ends_the_requests_in_flight_on_every_protocol_and_the_next_is_served(faulty: Server, before: str, kind: str) -> None:
    pid = engine_pid(faulty.url)
    streams = Streams(faulty.url)
    streams.wait_started()
    r = httpx.post(f"{faulty.url}/debug/engine-fault", json={"kind": kind}, timeout=30)
    assert r.json() == {"armed": kind, "pid": pid}
    text = streams.join()
    cause = CAUSES[kind]
    chat = text["/v1/chat/completions"]
    assert cause in chat and '"type":"engine_unavailable"' in chat and chat.rstrip().endswith("data: [DONE]")
    responses = text["/v1/responses"]
    assert "event: response.failed" in responses and cause in responses
    messages = text["/v1/messages"]
    assert "event: error" in messages and cause in messages
    new = wait_ready(faulty.url, pid)
    assert not alive(pid)
    after = answer(faulty.url)
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"] == before
    health = httpx.get(f"{faulty.url}/health").json()
    assert health["status"] == "ok" and health["toolserve"]["engine"]["pid"] == new
    assert cause in health["toolserve"]["engine"]["last_crash"]


def test_a_request_that_waited_during_a_crash_is_served(faulty: Server, before: str) -> None:
    """--parallel 3: the fourth request waits in the server, not in the engine process, and is
    answered by the restarted one."""
    pid = engine_pid(faulty.url)
    streams = Streams(faulty.url)
    streams.wait_started()
    waiting: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: waiting.setdefault("r", answer(faulty.url)))
    t.start()
    time.sleep(0.5)
    httpx.post(f"{faulty.url}/debug/engine-fault", json={"kind": "segv"}, timeout=30)
    streams.join()
    t.join(120)
    assert waiting["r"].status_code == 200
    assert waiting["r"].json()["choices"][0]["message"]["content"] == before
    assert not alive(pid)


def test_soak_a_kill_every_50_requests_loses_only_requests_in_flight(faulty: Server) -> None:
    async def run() -> tuple[int, list[str]]:
        done, errors = 0, []
        lock = asyncio.Lock()
        async with httpx.AsyncClient(base_url=faulty.url, timeout=120) as client:
            async def one() -> None:
                nonlocal done
                r = await client.post("/v1/chat/completions", json={**SHORT, "max_tokens": 4})
                async with lock:
                    done += 1
                    if r.status_code != 200:
                        errors.append(r.json()["error"]["type"])
                    if done % 50 == 0 and done < 300:
                        await client.post("/debug/engine-fault", json={"kind": "kill"})

            queue = list(range(300))

            async def worker() -> None:
                while queue:
                    queue.pop()
                    await one()

            await asyncio.gather(*(worker() for _ in range(3)))
        return done, errors

    done, errors = asyncio.run(run())
    assert done == 300
    assert set(errors) <= {"engine_unavailable"}
    assert len(errors) <= 5 * 3  # 5 kills, at most the 3 requests running each time
    assert answer(faulty.url).status_code == 200


def test_no_engine_process_outlives_a_killed_server(tmp_path: Path) -> None:
    port = free_port()
    srv = Server(["--ctx-size", str(CTX_SIZE)], port=port)
    pid = engine_pid(srv.url)
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    deadline = time.monotonic() + 20
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    srv.stop()
    assert not alive(pid)


def test_a_stopped_server_leaves_no_engine_process() -> None:
    srv = Server(["--ctx-size", str(CTX_SIZE)])
    pid = engine_pid(srv.url)
    assert answer(srv.url).status_code == 200
    srv.stop()
    assert srv.proc.returncode == 0
    assert not alive(pid)


def test_repeated_crashes_mark_the_model_failed_while_others_serve(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        f"models:\n  - id: weak\n    ctx_size: {CTX_SIZE}\n    preload: true\n    engine_timeout: {HANG_TIMEOUT}\n"
        f"  - id: strong\n    ctx_size: {CTX_SIZE}\n    preload: true\n"
    )
    srv = Server(["--config", str(cfg)], env=FAULTS)
    try:
        errors = []
        for _ in range(5):
            pid = engine_pid(srv.url, "weak")
            httpx.post(f"{srv.url}/debug/engine-fault", json={"kind": "abort", "model": "weak"}, timeout=30)
            r = answer(srv.url, LONG, model="weak")
            errors.append(r.json()["error"]["message"])
            if len(errors) < 5:
                wait_ready(srv.url, pid, "weak")
        assert all("was killed by SIGABRT" in e for e in errors)
        r = answer(srv.url, model="weak")
        assert r.status_code == 503 and r.json()["error"]["type"] == "engine_unavailable"
        assert "failed 5 times in a row" in r.json()["error"]["message"]
        health = httpx.get(f"{srv.url}/health").json()
        assert health["status"] == "degraded"
        assert health["models"]["weak"]["state"] == "failed" and health["models"]["weak"]["engine"]["failed"]
        cards = {m["id"]: m["toolserve"] for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}
        assert cards["weak"]["state"] == "failed" and "failed 5 times" in cards["weak"]["engine"]["failed"]
        assert answer(srv.url, model="strong").status_code == 200
    finally:
        srv.stop()


def test_fault_switch_is_absent_without_the_environment(server: Server) -> None:
    assert httpx.post(f"{server.url}/debug/engine-fault", json={"kind": "segv"}).status_code == 404


def test_a_broken_model_file_fails_the_start_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)  # a GGUF header with nonsense after it
    proc = subprocess.run([*toolserve_command(), "serve", "--port", "0", "--model", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and str(bad) in proc.stderr


def test_in_process_engine_still_serves() -> None:
    srv = Server(["--ctx-size", str(CTX_SIZE), "--no-engine-process"])
    try:
        body = httpx.get(f"{srv.url}/health").json()
        assert body["toolserve"]["engine"] == {"process": "server"}
        r = answer(srv.url)
        assert r.status_code == 200 and json.loads(r.text)["choices"][0]["message"]["content"]
    finally:
        srv.stop()
