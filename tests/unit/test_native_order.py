"""llama.cpp's native libraries load before numpy's when toolserve's entry point is imported
(issue 20: on a CUDA build the other order crashed at model load). The order is read from the
dynamic linker itself (LD_DEBUG=files prints each library's initialisation as it loads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_DEBUG is glibc's")


def load_order(code: str) -> list[str]:
    env = {**os.environ, "LD_DEBUG": "files"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line.split("calling init:", 1)[1].strip() for line in proc.stderr.splitlines() if "calling init:" in line]


def first(order: list[str], *needles: str) -> int:
    return next((i for i, path in enumerate(order) if any(n in path for n in needles)), -1)


@pytest.mark.parametrize("entry", ["import toolserve.cli", "from toolserve.cli import main", "import toolserve.constrain.matcher"])
def test_llama_loads_before_numpy(entry: str) -> None:
    order = load_order(entry)
    llama = first(order, "/libllama.", "/libggml-base.")
    numpy = first(order, "/numpy/", "/numpy.libs/")
    assert numpy >= 0, "numpy is no longer imported here: this test needs another way to see the order"
    assert llama >= 0, f"llama.cpp's libraries were not loaded by {entry!r}"
    assert llama < numpy, f"{order[numpy]} loaded before {order[llama]}"


def test_numpy_first_is_noticed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import numpy; import toolserve._native as n; print(n.numpy_first, n.loaded is not None)"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.stdout.split() == ["True", "True"], out.stderr
    out = subprocess.run(
        [sys.executable, "-c", "import toolserve._native as n; import numpy; print(n.numpy_first)"], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["False"], out.stderr
