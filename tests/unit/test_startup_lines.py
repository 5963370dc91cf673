"""What `toolserve serve` says at start: what it serves and where, for each protocol; and the
repack check's fallback on a CPU that faults (AMX in some VMs) said calmly at INFO, with WARNING
kept for a check that failed some other way."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from toolserve.cli import startup_lines
from toolserve.engine import repack
from toolserve.engine.repack import CACHE_FILE, PROBE_ENV, RepackCheck, decide_repack


def flags(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"host": "127.0.0.1", "port": 8477, "no_web": False, "api_key": None, **kw})


def test_one_model_every_protocol_and_the_page() -> None:
    assert startup_lines(flags(), ["SmolLM2-135M-Instruct.Q4_1"], [], []) == [
        "toolserve: serving model SmolLM2-135M-Instruct.Q4_1 on http://127.0.0.1:8477",
        "toolserve:   OpenAI API     http://127.0.0.1:8477/v1",
        "toolserve:   Anthropic API  http://127.0.0.1:8477/v1/messages",
        "toolserve:   Ollama API     http://127.0.0.1:8477/api",
        "toolserve:   chat page      http://127.0.0.1:8477/",
    ]


def test_several_models_ipv6_a_key_and_no_page() -> None:
    lines = startup_lines(flags(host="::1", port=8000, no_web=True, api_key="k"), ["a", "b"], ["e"], ["r"])
    assert lines[0] == "toolserve: serving models a, b, e (embeddings), r (rerank) on http://[::1]:8000 (API key required)"
    assert lines[1].endswith("http://[::1]:8000/v1") and not any("chat page" in line for line in lines)
    assert all(len(line) < 100 for line in lines)


def test_an_upstream_whose_model_is_not_named() -> None:
    assert startup_lines(flags(), [], [], [])[0] == "toolserve: serving the upstream's model on http://127.0.0.1:8477"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLSERVE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(PROBE_ENV, raising=False)
    return tmp_path / CACHE_FILE


def answer(reason: str, conclusive: bool) -> object:
    return lambda model: (RepackCheck(False, reason, 0.4), conclusive)


@pytest.mark.parametrize("signal", ["SIGSEGV", "SIGILL", "SIGBUS"])
def test_a_cpu_fault_is_a_calm_info_line(signal: str, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(repack, "run_probe", answer(f"a test evaluation with repacked weights died with {signal}", True))
    for _ in range(2):  # checked, then remembered: the same words
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="toolserve.engine.repack"):
            assert decide_repack(False, "/m/a.gguf") is False
        (record,) = caplog.records
        assert record.levelno == logging.INFO
        message = record.getMessage()
        assert "default layout" in message and "--no-repack skips the check" in message
        assert signal not in message and "died" not in message and len(message) < 160
    assert cache.exists()


def test_the_details_stay_at_debug(cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(repack, "run_probe", answer("a test evaluation with repacked weights died with SIGSEGV", True))
    with caplog.at_level(logging.DEBUG, logger="toolserve.engine.repack"):
        decide_repack(False, "/m/a.gguf")
    (debug,) = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert "SIGSEGV" in debug.getMessage() and str(cache) in debug.getMessage()


@pytest.mark.parametrize(("reason", "conclusive"), [
    ("a test evaluation with repacked weights died with SIGABRT", True),
    ("a test evaluation with repacked weights died with SIGKILL", True),
    ("the test evaluation did not finish within 120 s", False),
    ("the test evaluation exited with status 1: no such file", False),
])
def test_other_failures_stay_warnings(reason: str, conclusive: bool, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(repack, "run_probe", answer(reason, conclusive))
    with caplog.at_level(logging.INFO, logger="toolserve.engine.repack"):
        assert decide_repack(False, "/m/a.gguf") is False
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and f"weight repacking off: {reason}" in record.getMessage()
