"""Does llama.cpp's weight repacking work on this host?

llama.cpp may move some weights into "extra" buffer types at load (repacking): on a CPU that
reports Intel AMX, Q4_0/Q4_1/Q8_0 (and K-quant) weights go to the AMX buffer, and every batch of
more than one token then runs tile instructions. Inside some VMs the CPU reports AMX but the
hypervisor does not honour it, and the first `ldtilecfg` kills the process with SIGSEGV; a
one-token evaluation never reaches it. So the check evaluates a batch of several tokens, with
repacking on, in a child process: a fault kills the child, not the server. The answer is kept
per llama.cpp build and CPU under the user's cache dir, so the check runs once per host.

Run as `python -m toolserve.engine.repack MODEL` it is the child.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_FILE = "repack-check.json"
TIMEOUT_S = 120.0
# Test-only: a signal name (SEGV, ABRT, ...) makes the child kill itself with it after loading,
# as a CPU whose repacked kernels fault would; "pass" makes it report success without
# evaluating. Part of the cache key, so such an answer never stands for the real host.
PROBE_ENV = "TOOLSERVE_REPACK_PROBE"
PROMPT = b"The quick brown fox jumps over the lazy dog, and then it runs far away."
DIED = "a test evaluation with repacked weights died with "
# the signals of a CPU that refuses the repacked kernels' instructions (AMX tiles in some VMs):
# an expected, handled answer; any other failure of the check is unexpected
CPU_FAULTS = ("SIGSEGV", "SIGILL", "SIGBUS")


@dataclass(frozen=True)
class RepackCheck:
    works: bool
    reason: str  # one line: what the check found
    seconds: float  # how long the child ran (0 for a remembered answer)
    cached: bool = False  # remembered from an earlier check on this build and CPU


def cache_dir() -> Path:
    """TOOLSERVE_CACHE_DIR, else $XDG_CACHE_HOME/toolserve, else ~/.cache/toolserve."""
    explicit = os.environ.get("TOOLSERVE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve"


def _build_id() -> list[str]:
    """llama-cpp-python's version and its native libraries (name, size, mtime): a rebuild,
    e.g. with CUDA or other CPU flags, is another build."""
    spec = importlib.util.find_spec("llama_cpp")
    folders = list(spec.submodule_search_locations or []) if spec else []
    out = []
    for folder in folders:
        lib = Path(folder) / "lib"
        for f in sorted(lib.glob("*")) if lib.is_dir() else []:
            if f.is_file():
                st = f.stat()
                out.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    try:
        from importlib.metadata import version

        out.insert(0, version("llama-cpp-python"))
    except Exception:  # not installed as a distribution (e.g. a source tree on sys.path)
        out.insert(0, "unknown")
    return out


def _cpu_id() -> list[str]:
    """The CPU's vendor, model and feature flags (Linux), else what `platform` knows."""
    out = [platform.machine(), platform.processor()]
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return out
    seen: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part") and key not in seen:
            seen.add(key)
            out.append(f"{key}={' '.join(sorted(value.split())) if key in ('flags', 'Features') else value.strip()}")
    return out


def host_key(probe_model: str) -> str:
    forced = os.environ.get(PROBE_ENV, "")
    parts = [*_build_id(), *_cpu_id(), f"model={Path(probe_model).name}", f"forced={forced}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _describe(rc: int, stderr: str) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return DIED + name
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "no message")
    return f"the test evaluation exited with status {rc}: {last[:200]}"


def run_probe(probe_model: str, timeout: float = TIMEOUT_S) -> tuple[RepackCheck, bool]:
    """Evaluate a batch in a child with repacking on. Returns the check and whether the answer
    is conclusive (worth remembering): a clean run, or a death by signal."""
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "toolserve.engine.repack", probe_model]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        took = time.perf_counter() - started
        return RepackCheck(False, f"the test evaluation did not finish within {timeout:.0f} s", took), False
    except OSError as exc:
        return RepackCheck(False, f"the test evaluation could not start: {exc}", 0.0), False
    took = time.perf_counter() - started
    if done.returncode == 0 and done.stdout.strip().endswith("ok"):
        return RepackCheck(True, "a test evaluation with repacked weights ran cleanly", took), True
    return RepackCheck(False, _describe(done.returncode, done.stderr), took), done.returncode < 0


def _read_cache(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, check: RepackCheck) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path)
        data[key] = {**asdict(check), "cached": False, "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), "utf-8")
        tmp.replace(path)
    except OSError as exc:  # a read-only home is no reason to fail: the check just runs again next time
        log.debug("cannot remember the repack check in %s: %s", path, exc)


def check_repack(probe_model: str, *, probe: Callable[[str], tuple[RepackCheck, bool]] | None = None) -> RepackCheck:
    """Whether repacking works here: remembered per llama.cpp build and CPU, else probed now."""
    path = cache_dir() / CACHE_FILE
    key = host_key(probe_model)
    known = _read_cache(path).get(key)
    if isinstance(known, dict) and isinstance(known.get("works"), bool):
        return RepackCheck(bool(known["works"]), str(known.get("reason", "")), 0.0, cached=True)
    check, conclusive = (probe or run_probe)(probe_model)
    if conclusive:
        _write_cache(path, key, check)
    return check


def decide_repack(no_repack: bool, probe_model: str) -> bool:
    """Whether to load with repacking: off when asked, else as the host check says, with one
    log line when it is off: INFO where the check's child faulted as some CPUs make it (the
    fallback works), WARNING where the check failed some other way."""
    if no_repack:
        log.info("weight repacking off (--no-repack)")
        return False
    check = check_repack(probe_model)
    took = "remembered" if check.cached else f"checked in {check.seconds:.1f} s"
    if check.works:
        log.debug("weight repacking on: %s (%s)", check.reason, took)
        return True
    if check.reason.removeprefix(DIED) in CPU_FAULTS:  # remembered answers too: the same words
        log.info("weights stay in llama.cpp's default layout on this host (the repack check faulted, as it does on some CPUs); --no-repack skips the check")
        log.debug("repack check: %s (%s; cache %s)", check.reason, took, cache_dir() / CACHE_FILE)
        return False
    log.warning(
        "weight repacking off: %s on this CPU (%s; cache %s); loading without it, as --no-repack does",
        check.reason, took, cache_dir() / CACHE_FILE,
    )
    return False


def _child(model: str) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a fault here is expected: no core file
    except (ImportError, ValueError, OSError):
        pass
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model, n_ctx=128, n_batch=64, n_ubatch=64, n_threads=1, verbose=False)
    forced = os.environ.get(PROBE_ENV, "").upper().removeprefix("SIG")
    if forced == "PASS":
        print("ok", flush=True)
        return
    if forced:
        os.kill(os.getpid(), getattr(signal, f"SIG{forced}", signal.SIGSEGV))
    tokens = llm.tokenize(PROMPT, add_bos=True)
    llm.eval(tokens)  # several tokens in one batch: the path that runs repacked (AMX tile) kernels
    print("ok", flush=True)


if __name__ == "__main__":
    _child(sys.argv[1])
