"""The command line: one answer on stdout, and startup errors as one clear line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

from tests.conftest import toolserve_command
from toolserve.engine.repack import CACHE_FILE, PROBE_ENV


def run(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*toolserve_command(), *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_run_prints_an_answer() -> None:
    a = run("run", "Say hello.", "--max-tokens", "12", "--log-level", "warning")
    assert a.returncode == 0, a.stderr
    assert a.stdout.strip() and not a.stderr  # nothing logged at exit (the engine thread once outlived the loop)
    b = run("run", "Say hello.", "--max-tokens", "12", "--log-level", "warning")
    assert a.stdout == b.stdout  # greedy by default


def test_run_on_a_host_whose_repacking_faults(tmp_path: Path) -> None:
    """`run` takes the same check as `serve`: the answer is the same with repacking off."""
    plain = run("run", "Say hello.", "--max-tokens", "12", "--log-level", "warning", "--no-repack")
    faulty = run("run", "Say hello.", "--max-tokens", "12", "--log-level", "warning", env={"TOOLSERVE_CACHE_DIR": str(tmp_path), PROBE_ENV: "SEGV"})
    assert faulty.returncode == 0, faulty.stderr
    assert faulty.stdout == plain.stdout and faulty.stdout.strip()
    assert not faulty.stderr  # a handled fallback: nothing at --log-level warning
    (entry,) = json.loads((tmp_path / CACHE_FILE).read_text()).values()
    assert entry["works"] is False and "SIGSEGV" in entry["reason"]


def test_chat_reads_turns_from_stdin() -> None:
    proc = subprocess.run(
        [*toolserve_command(), "chat", "--max-tokens", "8", "--log-level", "warning"],
        input="Hello\nHow are you?\n\n", capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("> ") >= 2


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_model_file(tmp_path: Path) -> None:
    _one_line_error(run("serve", "--model", str(tmp_path / "nope.gguf")), "not found")


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    _one_line_error(run("serve", "--model", str(bad)), "not a GGUF")


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _one_line_error(run("serve", "--port", str(port)), "cannot listen")


def test_model_alias(tmp_path: Path) -> None:
    import httpx

    from tests.conftest import Server

    srv = Server(["--model-alias", "tiny", "--ctx-size", "512"])
    try:
        assert httpx.get(f"{srv.url}/v1/models").json()["data"][0]["id"] == "tiny"
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200
    finally:
        srv.stop()
