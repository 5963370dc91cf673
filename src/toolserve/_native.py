"""llama.cpp's native libraries go into the process before numpy's.

On a CUDA build, `import numpy` before llama-cpp-python's libraries are loaded made loading a
model crash inside libggml-cuda (issue 20; `import numpy; import llama_cpp; Llama(...)` crashes,
the other order works; a CPU build works either way; the root cause was not found). toolserve
imports numpy early (constrain/matcher.py, through cli/), so the package itself loads
libllama (and through its dependencies libggml and the GPU backend's libraries) first.
llama-cpp-python later opens the same file with the same flags and gets the same handle.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path

numpy_first = False  # numpy was imported before this ran (a host program's import): the guard came too late
loaded: str | None = None  # the library loaded here, if any


def _library() -> Path | None:
    base = os.environ.get("LLAMA_CPP_LIB_PATH")  # llama-cpp-python's own override of its lib folder
    if base is None:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or spec.origin is None:
            return None
        base = str(Path(spec.origin).parent / "lib")
    for name in ("libllama.so", "libllama.dylib", "llama.dll"):
        if (Path(base) / name).is_file():
            return Path(base) / name
    return None


def load_llama_first() -> None:
    """Load libllama now, unless it cannot be found or loaded: then llama_cpp's own import
    reports the problem where a model is loaded, and nothing else (e.g. `toolserve parse`) fails."""
    global numpy_first, loaded
    numpy_first = "numpy" in sys.modules
    path = _library()
    if path is None:
        return
    try:
        ctypes.CDLL(str(path))
    except OSError:
        return
    loaded = str(path)
