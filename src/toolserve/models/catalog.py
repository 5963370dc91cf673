"""What is on disk, from every place a reference can name: the Hugging Face cache, Ollama's
store, LM Studio's folder (`toolserve models`), and removing what toolserve downloaded
(`toolserve rm`). Reads headers only; never loads a model, never touches the network.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolserve.errors import ModelLoadError
from toolserve.models import hubcache, lmstudio, ollama
from toolserve.models.choose import FILE_TYPES, choose, choose_file, models_in, quant_of
from toolserve.models.files import gguf_metadata, model_bytes
from toolserve.models.refs import Bundled, HubFile, HubRepo, LmStudioModel, LocalFile, OllamaModel, canonical, parse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OnDisk:
    reference: str
    source: str  # hf | ollama | lmstudio
    path: Path  # the file to load (the first part of a split model)
    mmproj: Path | None
    parts: int = 1
    pulled: bool = False  # downloaded by toolserve (`toolserve rm` may delete it)


def _hub() -> list[OnDisk]:
    out = []
    for repo in hubcache.repos():
        snap = hubcache.snapshot(repo)
        if snap is None:
            continue
        for first in models_in(snap.names):
            try:
                choice = choose_file(snap.names, first, repo)
            except ModelLoadError as exc:  # a split model with parts missing (a pull cut short)
                log.info("%s", exc.message)
                continue
            quant = quant_of(first)
            short = quant is not None and choose(snap.names, quant, repo).files[0] == first
            ref = f"{repo}:{quant}" if short else f"hf://{repo}/{first}"
            path = snap.path / first
            mmproj = snap.path / choice.mmproj if choice.mmproj else None
            out.append(OnDisk(ref, "hf", path, mmproj, len(choice.files), hubcache.pulled(repo, path)))
    return out


def _ollama() -> list[OnDisk]:
    import json

    out = []
    root = ollama.store()
    for ref, manifest in ollama.entries(root):
        try:
            found = ollama.read_manifest(root, json.loads(manifest.read_text("utf-8")), str(manifest))
        except (ModelLoadError, OSError, ValueError):
            continue
        if found.model.is_file():
            out.append(OnDisk(f"ollama:{ref.name}", "ollama", found.model, found.projector))
    return out


def _lmstudio() -> list[OnDisk]:
    out = []
    root = lmstudio.folder()
    for ref in lmstudio.repos(root):
        for file in lmstudio.files(ref, root):
            try:
                projector = lmstudio.projector_of(ref, file, root)
            except ModelLoadError:
                continue
            mmproj = root / ref.repo / projector if projector else None
            out.append(OnDisk(f"lmstudio:{ref.repo}/{file}", "lmstudio", root / ref.repo / file, mmproj))
    return out


def on_disk() -> list[OnDisk]:
    """Every model file the references can name, Hugging Face first."""
    return [*_hub(), *_ollama(), *_lmstudio()]


def describe(item: OnDisk) -> dict[str, Any]:
    """A row of `toolserve models`: the file's header read for its architecture, quantisation,
    training context and chat template (and with it the tool format the server would detect)."""
    from toolserve.formats.registry import explain_detection
    from toolserve.formats.template import choose_template

    row: dict[str, Any] = {
        "reference": item.reference, "source": item.source, "size_bytes": model_bytes(item.path),
        "parts": item.parts, "path": str(item.path), "mmproj": str(item.mmproj) if item.mmproj else None,
        "vision": item.mmproj is not None, "downloaded_by_toolserve": item.pulled,
    }
    try:
        meta = gguf_metadata(item.path, keep=frozenset({"tokenizer.chat_template"}))
    except (ModelLoadError, OSError) as exc:
        return {**row, "error": str(exc)}
    arch = str(meta.get("general.architecture") or "")
    template = meta.get("tokenizer.chat_template")
    source, _ = choose_template(template if isinstance(template, str) else None, arch)
    file_type = meta.get("general.file_type")
    return {
        **row,
        "architecture": arch or None,
        "quantization": quant_of(item.path.name) or (FILE_TYPES.get(file_type) if isinstance(file_type, int) else None),
        "context_length": meta.get(f"{arch}.context_length"),
        "tool_format": explain_detection(source, arch).format_id,
    }


def remove(spec: str) -> list[str]:
    """Delete what toolserve downloaded for `spec` from the Hugging Face cache: the files it
    names (a repo: all of them; a quantisation or a file: its parts, and its projector once no
    other model of the repo is left). Returns the deleted files; refuses other tools' files."""
    ref = parse(spec)
    if isinstance(ref, OllamaModel):
        raise ModelLoadError(f"{canonical(ref)} is Ollama's: `ollama rm {ref.name}` removes it (toolserve never deletes another program's files)")
    if isinstance(ref, LmStudioModel):
        raise ModelLoadError(f"{canonical(ref)} is LM Studio's: delete it in LM Studio (toolserve never deletes another program's files)")
    if isinstance(ref, LocalFile | Bundled):
        raise ModelLoadError(f"toolserve rm deletes what `toolserve pull` downloaded from the Hugging Face Hub; {spec} is not a Hub reference")
    assert isinstance(ref, HubRepo | HubFile)
    snap = hubcache.snapshot(ref.repo)
    if snap is None:
        raise ModelLoadError(f"{canonical(ref)} is not in the Hugging Face cache {hubcache.hub_cache()}")
    names = list(snap.names)
    if isinstance(ref, HubRepo) and ref.quant is None:
        chosen = names
    else:
        choice = choose_file(names, ref.file, ref.repo) if isinstance(ref, HubFile) else choose(names, ref.quant, ref.repo)
        chosen = list(choice.files)
        others = [m for m in models_in(names) if m not in chosen]
        if choice.mmproj and not others:
            chosen.append(choice.mmproj)
    mine = [n for n in chosen if hubcache.pulled(ref.repo, snap.path / n)]
    if not mine:
        raise ModelLoadError(
            f"toolserve did not download {canonical(ref)} (another program put it in the Hugging Face cache "
            f"{hubcache.hub_cache()}): `hf cache delete` removes it"
        )
    kept = [n for n in chosen if n not in mine]
    if kept:
        log.warning("kept %s: another program downloaded it", ", ".join(kept))
    return hubcache.remove(ref.repo, mine)
