"""Ollama's store, read in place: `ollama:NAME[:TAG]` names a manifest whose layers point at
blobs (the GGUF, the projector, the Go template, the default parameters). Nothing is copied
and nothing is written there.

Layout (OLLAMA_MODELS, default ~/.ollama/models; a Linux service install keeps it in
/usr/share/ollama/.ollama/models):

    manifests/HOST/NAMESPACE/MODEL/TAG    JSON: {"layers": [{"mediaType": ..., "digest": "sha256:HEX"}]}
    blobs/sha256-HEX
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolserve.errors import ModelLoadError
from toolserve.models.refs import OllamaModel

MODEL = "application/vnd.ollama.image.model"
PROJECTOR = "application/vnd.ollama.image.projector"
PARAMS = "application/vnd.ollama.image.params"
ADAPTER = "application/vnd.ollama.image.adapter"
# Ollama's parameter names -> toolserve's sampling fields (its `stop`, `num_ctx` ... are not taken)
PARAM_FIELDS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "repeat_penalty": "repetition_penalty"}


def store() -> Path:
    """OLLAMA_MODELS, else ~/.ollama/models, else the Linux service's /usr/share/ollama/.ollama/models."""
    explicit = os.environ.get("OLLAMA_MODELS")
    if explicit:
        return Path(explicit).expanduser()
    home = Path.home() / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    return service if not home.is_dir() and service.is_dir() else home


@dataclass(frozen=True)
class Manifest:
    model: Path  # the GGUF blob
    projector: Path | None = None
    params: dict[str, float] = field(default_factory=dict)  # sampling fields from the params layer
    adapters: int = 0  # LoRA layers (not applied)


def blob(root: Path, digest: str) -> Path:
    """`sha256:HEX` -> root/blobs/sha256-HEX."""
    return root / "blobs" / digest.replace(":", "-")


def read_manifest(root: Path, data: dict[str, Any], where: str) -> Manifest:
    """The blobs a manifest's layers name (pure but for reading the small params blob)."""
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise ModelLoadError(f"{where}: not an Ollama manifest (no layers)")
    by_type: dict[str, list[str]] = {}
    for layer in layers:
        if isinstance(layer, dict) and isinstance(layer.get("digest"), str):
            by_type.setdefault(str(layer.get("mediaType")), []).append(layer["digest"])
    if not by_type.get(MODEL):
        raise ModelLoadError(f"{where}: the manifest names no model layer")
    params: dict[str, float] = {}
    for digest in by_type.get(PARAMS, [])[:1]:
        params = _params(blob(root, digest))
    projectors = by_type.get(PROJECTOR, [])
    return Manifest(
        model=blob(root, by_type[MODEL][0]),
        projector=blob(root, projectors[0]) if projectors else None,
        params=params,
        adapters=len(by_type.get(ADAPTER, [])),
    )


def _params(path: Path) -> dict[str, float]:
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, float] = {}
    for key, name in PARAM_FIELDS.items():
        value = raw.get(key) if isinstance(raw, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def manifest_path(root: Path, ref: OllamaModel) -> Path:
    return root / "manifests" / ref.host / ref.namespace / ref.model / ref.tag


def _find(root: Path, ref: OllamaModel) -> Path | None:
    exact = manifest_path(root, ref)
    if exact.is_file():
        return exact
    # Ollama matches names without regard to case
    want = [ref.host, ref.namespace, ref.model, ref.tag]
    here = root / "manifests"
    for part in want:
        if not here.is_dir():
            return None
        here = next((p for p in here.iterdir() if p.name.lower() == part.lower()), here / part)
    return here if here.is_file() else None


def resolve(ref: OllamaModel) -> Manifest:
    """The blobs of `ref` in Ollama's store, or a one-line error naming what the store holds."""
    root = store()
    path = _find(root, ref)
    if path is None:
        held = [r.name for r, _ in entries(root)]
        holds = f"it holds {', '.join(held[:10])}" if held else "it holds no models"
        raise ModelLoadError(
            f"ollama:{ref.name} is not in Ollama's store {root} ({holds}); `ollama pull {ref.name}` fetches it "
            "(OLLAMA_MODELS names another store)"
        )
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read Ollama's manifest {path}: {exc}") from None
    found = read_manifest(root, data, str(path))
    if not found.model.is_file():
        raise ModelLoadError(f"ollama:{ref.name}: its model blob {found.model} is missing from Ollama's store")
    try:
        with found.model.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"ollama:{ref.name}: cannot read its model blob {found.model}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise ModelLoadError(f"ollama:{ref.name}: its model blob {found.model} is not a GGUF file (toolserve loads GGUF models only)")
    return found


def entries(root: Path | None = None) -> Iterator[tuple[OllamaModel, Path]]:
    """Every model in the store with its manifest file, sorted by name."""
    root = root or store()
    base = root / "manifests"
    if not base.is_dir():
        return
    for path in sorted(p for p in base.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = path.relative_to(base).parts
        yield OllamaModel(host, namespace, model, tag, True), path

