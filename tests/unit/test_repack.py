"""The weight-repacking check: a child process evaluates a batch with repacking on; its answer is
remembered per llama.cpp build and CPU; a fault turns repacking off. The child runs for real
here (a forced fault or pass through the test switch); the cache logic runs with a stub probe."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from toolserve.engine import repack
from toolserve.engine.repack import CACHE_FILE, PROBE_ENV, RepackCheck, check_repack, decide_repack, run_probe
from toolserve.models.files import bundled_model


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TOOLSERVE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(PROBE_ENV, raising=False)
    return tmp_path / CACHE_FILE


class Probe:
    """A stand-in for the child: answers `result` and counts its calls."""

    def __init__(self, works: bool, conclusive: bool = True):
        self.result = (RepackCheck(works, "stub says so", 0.5), conclusive)
        self.calls = 0

    def __call__(self, model: str) -> tuple[RepackCheck, bool]:
        self.calls += 1
        return self.result


@pytest.mark.parametrize("works", [True, False])
def test_answer_is_remembered_per_host(works: bool, cache: Path) -> None:
    probe = Probe(works)
    first = check_repack("/m/a.gguf", probe=probe)
    assert (first.works, first.cached, probe.calls) == (works, False, 1)
    again = check_repack("/m/a.gguf", probe=probe)
    assert (again.works, again.cached, again.reason, probe.calls) == (works, True, "stub says so", 1)
    (entry,) = json.loads(cache.read_text()).values()
    assert entry["works"] is works and entry["checked_at"]


def test_another_build_or_cpu_checks_again(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Probe(True)
    check_repack("/m/a.gguf", probe=probe)
    monkeypatch.setattr(repack, "_cpu_id", lambda: ["another", "cpu"])
    check_repack("/m/a.gguf", probe=probe)
    monkeypatch.setattr(repack, "_build_id", lambda: ["another build"])
    check_repack("/m/a.gguf", probe=probe)
    monkeypatch.setenv(PROBE_ENV, "SEGV")  # a forced answer is never taken for the host's
    check_repack("/m/a.gguf", probe=probe)
    assert probe.calls == 4


def test_inconclusive_answer_is_not_remembered(cache: Path) -> None:
    probe = Probe(False, conclusive=False)
    assert not check_repack("/m/a.gguf", probe=probe).works
    assert not check_repack("/m/a.gguf", probe=probe).works
    assert probe.calls == 2 and not cache.exists()


def test_unreadable_cache_is_checked_again(cache: Path) -> None:
    cache.write_text("{not json")
    probe = Probe(True)
    assert check_repack("/m/a.gguf", probe=probe).works and probe.calls == 1
    assert json.loads(cache.read_text())  # rewritten whole


def test_no_repack_skips_the_check(cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="toolserve.engine.repack"):
        assert decide_repack(True, "/nonexistent.gguf") is False
    assert not cache.exists() and "--no-repack" in caplog.text


def test_fault_logs_one_line_and_turns_repacking_off(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(repack, "run_probe", Probe(False))
    with caplog.at_level(logging.INFO, logger="toolserve.engine.repack"):
        assert decide_repack(False, "/m/a.gguf") is False
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "weight repacking off: stub says so" in record.getMessage()


@pytest.mark.parametrize(("forced", "name"), [("SEGV", "SIGSEGV"), ("SIGABRT", "SIGABRT"), ("ILL", "SIGILL")])
def test_child_fault_is_reported_with_its_signal(forced: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_ENV, forced)
    check, conclusive = run_probe(str(bundled_model()))
    assert not check.works and conclusive
    assert check.reason == f"a test evaluation with repacked weights died with {name}"
    assert check.seconds > 0


def test_child_that_cannot_load_is_inconclusive(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    check, conclusive = run_probe(str(bogus))
    assert not check.works and not conclusive
    assert check.reason.startswith("the test evaluation exited with status 1: ")


def test_child_that_hangs_is_inconclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    check, conclusive = run_probe(str(bundled_model()), timeout=0.01)
    assert not check.works and not conclusive and "did not finish" in check.reason


def test_forced_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_ENV, "pass")
    check, conclusive = run_probe(str(bundled_model()))
    assert check.works and conclusive and check.reason == "a test evaluation with repacked weights ran cleanly"


def test_real_check_agrees_with_a_plain_evaluation() -> None:
    """On this host, unforced: the check's answer is what a batch evaluation with repacking on
    really does (run here in a second child, so a fault cannot take the test run down)."""
    check, conclusive = run_probe(str(bundled_model()))
    assert conclusive
    code = (
        "import sys, llama_cpp; llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=128, n_batch=64, verbose=False);"
        "llm.eval(llm.tokenize(b'one two three four five six seven eight nine ten', add_bos=True)); print('ok')"
    )
    plain = subprocess.run([sys.executable, "-c", code, str(bundled_model())], capture_output=True, text=True, timeout=120)
    assert check.works is (plain.returncode == 0), (check, plain.returncode, plain.stderr[-500:])


@pytest.mark.parametrize("on", [True, False])
def test_the_setting_reaches_llama_cpp(on: bool) -> None:
    from toolserve.engine.llama_cpp import LlamaCppEngine

    engine = LlamaCppEngine(str(bundled_model()), n_ctx=256, repack=on)
    try:
        assert engine.info.repack is on
        assert engine._llm.model_params.use_extra_bufts is on  # the struct llama_model_load_from_file got
    finally:
        engine.close()


def model_buffers(model: str, on: bool) -> tuple[set[str], str]:
    """The buffer types llama.cpp puts a model's weights in (from its load log), loaded by the
    engine's `Llama` in a child (load only, no evaluation), and the CPU features it reports."""
    code = (
        "import sys; from toolserve.engine.llama_cpp import _Llama;"
        "_Llama(repack=sys.argv[2] == 'on', model_path=sys.argv[1], n_ctx=128, verbose=True)"
    )
    done = subprocess.run([sys.executable, "-c", code, model, "on" if on else "off"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    buffers = {line.split("load_tensors:")[1].split("model buffer")[0].strip() for line in done.stderr.splitlines() if "model buffer size" in line}
    features = next((line for line in done.stderr.splitlines() if line.startswith("CPU :")), "")
    return buffers, features


def test_repacking_off_keeps_every_weight_in_plain_buffers(gemma_path: str) -> None:
    """Gemma 3's Q4_K weights are repacked where the CPU has AVX2 (CPU_REPACK) or AMX; with
    repacking off llama.cpp keeps them all in the mapped file."""
    on, features = model_buffers(gemma_path, True)
    off, _ = model_buffers(gemma_path, False)
    assert off == {"CPU_Mapped"}
    if "AVX2 = 1" in features or "AMX_INT8 = 1" in features:
        assert on - {"CPU_Mapped"}, (on, features)
