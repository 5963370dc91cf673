"""llama.cpp's own `llama-server`, `llama-bench` and `llama-batched-bench`, for the benches.

They are built from the llama.cpp vendored in the sdist of the installed llama-cpp-python (so they
run the same llama.cpp as toolserve), downloaded from PyPI with pip, and cached under
`~/.cache/toolserve-bench/llama.cpp-<version>/` (`TOOLSERVE_BENCH_CACHE` moves the folder), so
only the first run builds (several minutes on 2 cores). Nothing of llama.cpp is committed.

Some VMs report Intel AMX but fault on its first instruction once weights are repacked; toolserve
checks that (toolserve.engine.repack), and `server_flags()` / `bench_flags()` turn repacking off
in the binaries when the check says it faults.

    python bench/llama_server.py          build (or find) the binaries and print their paths
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

BINARIES = ("llama-server", "llama-bench", "llama-batched-bench")
# This llama.cpp (0.3.36's) needs no network to build with these: no HTTPS (OpenSSL) in the
# server, no web UI (by default its assets are downloaded from a Hugging Face bucket at build
# time), static libraries so the cached binaries stand alone. LLAMA_CURL is deprecated there
# (a warning only); older llama.cpp versions need it OFF, so it stays.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


def log(msg: str) -> None:
    print(f"[llama.cpp] {msg}", file=sys.stderr, flush=True)


def version() -> str:
    return importlib.metadata.version("llama-cpp-python")


def cache_dir(ver: str) -> Path:
    base = os.environ.get("TOOLSERVE_BENCH_CACHE") or str(Path.home() / ".cache" / "toolserve-bench")
    return Path(base).expanduser() / f"llama.cpp-{ver}"


def _cmake() -> str:
    found = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("cmake not found: install it (`.venv/bin/pip install cmake`) and run again")
    return found


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    log("+ " + " ".join(cmd))
    subprocess.run(cmd, cwd=cwd, check=True, stdin=subprocess.DEVNULL)


def build(ver: str, dest: Path, jobs: int) -> None:
    """Download the sdist, build the three binaries, copy them into `dest`."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="toolserve-llama.cpp-") as tmp:
        work = Path(tmp)
        log(f"downloading the llama-cpp-python {ver} sdist from PyPI")
        _run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--quiet",
              f"llama-cpp-python=={ver}", "-d", str(work)])
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+ / 3.11.4+
                tar.extractall(work, filter="data")
            else:
                tar.extractall(work)  # an sdist from PyPI
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        out = work / "build"
        cmake = _cmake()
        log(f"configuring {src}")
        _run([cmake, "-S", str(src), "-B", str(out), *CMAKE_OPTIONS])
        log(f"building {', '.join(BINARIES)} with {jobs} jobs (several minutes on 2 cores)")
        _run([cmake, "--build", str(out), "--target", *BINARIES, f"-j{jobs}"])
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in BINARIES:
            shutil.copy2(out / "bin" / name, staging / name)
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    log(f"built in {time.monotonic() - started:.0f} s, cached in {dest}")


def binaries(jobs: int | None = None) -> dict[str, Path]:
    """{name: path} of the three binaries for the installed llama-cpp-python, built if not cached."""
    ver = version()
    dest = cache_dir(ver)
    paths = {name: dest / name for name in BINARIES}
    if all(p.is_file() for p in paths.values()):
        log(f"using the cached llama.cpp {ver} binaries in {dest}")
    else:
        build(ver, dest, jobs or os.cpu_count() or 1)
    return paths


@cache
def repack_works(model: str) -> bool:
    """toolserve's check (remembered per llama.cpp build and CPU): False where repacked weights fault."""
    from toolserve.engine.repack import check_repack

    check = check_repack(model)
    if not check.works:
        log(f"weight repacking off in llama.cpp's binaries: {check.reason}")
    return check.works


@cache
def help_text(binary: Path) -> str:
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.stdout + done.stderr


def has_flag(binary: Path, flag: str) -> bool:
    return any(flag in line.replace(",", " ").split() for line in help_text(binary).splitlines())


def server_flags(server: Path, model: str) -> list[str]:
    """`--no-repack` where repacking faults (llama-server's flag; its common/arg.cpp)."""
    if repack_works(model):
        return []
    if not has_flag(server, "--no-repack"):
        raise SystemExit(f"repacking faults here and {server} has no --no-repack flag")
    return ["--no-repack"]


def bench_flags(bench: Path, model: str) -> list[str]:
    """`--repack 0` for llama-bench where repacking faults. llama-batched-bench takes the common
    arguments, so it gets `server_flags()`."""
    if repack_works(model):
        return []
    if not has_flag(bench, "--repack"):
        raise SystemExit(f"repacking faults here and {bench} has no --repack flag")
    return ["--repack", "0"]


def server_command(server: Path, model: str, port: int, threads: int, ctx: int, parallel: int = 1,
                   extra: tuple[str, ...] = ()) -> list[str]:
    """llama-server on 127.0.0.1:`port` with `parallel` slots of `ctx` tokens each.

    llama-server's `-c` is the whole KV pool, so it gets ctx * parallel; with an explicit `-np`
    each slot has its own KV stream of `ctx` cells (no `--kv-unified`), as toolserve's
    sequences do."""
    cmd = [str(server), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
           "-tb", str(threads), "-c", str(ctx * parallel), "-np", str(parallel)]
    return [*cmd, *server_flags(server, model), *extra]


def main() -> None:
    for name, path in binaries().items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
