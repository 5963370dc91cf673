"""A model reference made into files on disk: the one place where `--model`, models.yaml's
`model:`, `--embedding-model` and `toolserve pull` turn a name into a GGUF path (downloading
from the Hub when needed, reading Ollama's and LM Studio's stores in place).

Only the command line and the config file reach this: the HTTP API never pulls.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from toolserve.config import ModelConfig, ModelOrigin, ModelsConfig
from toolserve.errors import ModelLoadError
from toolserve.models import hub, lmstudio, ollama
from toolserve.models.files import bundled_model, check_gguf
from toolserve.models.refs import (
    Bundled,
    HubFile,
    HubRepo,
    LmStudioModel,
    LocalFile,
    OllamaModel,
    Ref,
    canonical,
    parse,
    short_name,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolved:
    path: Path  # the GGUF to load (the first part of a split model)
    mmproj: Path | None = None  # the projector that came with it
    origin: ModelOrigin | None = None  # None: a plain path or the bundled model
    parts: tuple[Path, ...] = ()  # every file of the model (all parts of a split model)
    downloaded: bool = False


def resolve(spec: str | None, *, offline: bool = False, token: str | None = None) -> Resolved:
    """The files `spec` names (None: the bundled model)."""
    return resolve_ref(Bundled() if spec is None else parse(spec), offline=offline, token=token)


def resolve_ref(ref: Ref, *, offline: bool = False, token: str | None = None) -> Resolved:
    if isinstance(ref, Bundled):
        path = bundled_model()
        return Resolved(path, parts=(path,))
    if isinstance(ref, LocalFile):
        path = check_gguf(ref.path)
        return Resolved(path, parts=(path,))
    name, reference = short_name(ref), canonical(ref)
    if isinstance(ref, HubRepo | HubFile):
        try:
            got = hub.fetch(ref, offline=offline, token=token)
        except ModelLoadError as exc:
            if isinstance(ref, HubRepo) and "was not found on the Hugging Face Hub" in exc.message:
                # `models/foo` may have meant a folder here: say that it was looked for too
                raise ModelLoadError(f"{exc.message} (nor is there a file {reference} here)") from None
            raise
        first = check_gguf(got.files[0])
        origin = ModelOrigin(reference, "hf", name)
        return Resolved(first, got.mmproj, origin, got.files, got.downloaded)
    if isinstance(ref, OllamaModel):
        found = ollama.resolve(ref)
        if found.adapters:
            log.warning("%s: Ollama's manifest has %d LoRA adapter layer(s); toolserve does not apply them", reference, found.adapters)
        sampling = tuple(sorted(found.params.items()))
        origin = ModelOrigin(reference, "ollama", name, sampling)
        return Resolved(found.model, found.projector, origin, (found.model,))
    assert isinstance(ref, LmStudioModel)
    repo_dir, choice = lmstudio.resolve(ref)
    parts = tuple(repo_dir / f for f in choice.files)
    mmproj = repo_dir / choice.mmproj if choice.mmproj else None
    return Resolved(check_gguf(parts[0]), mmproj, ModelOrigin(reference, "lmstudio", name), parts)


def resolve_config(cfg: ModelConfig, *, offline: bool = False, token: str | None = None) -> ModelConfig:
    """`cfg` with a model reference replaced by its file (a path or the bundled model stay as
    they are): the projector that came with it unless `mmproj` names one, and its origin."""
    if cfg.model is None:
        return cfg
    ref = parse(cfg.model)
    if isinstance(ref, LocalFile | Bundled):
        return cfg if isinstance(ref, LocalFile) else dataclasses.replace(cfg, model=None)
    got = resolve_ref(ref, offline=offline, token=token)
    mmproj = cfg.mmproj or (str(got.mmproj) if got.mmproj else None)
    where = f"{got.path}" + (f" (+{len(got.parts) - 1} more parts)" if len(got.parts) > 1 else "")
    log.info("%s: %s%s", canonical(ref), where, f", projector {got.mmproj}" if got.mmproj and not cfg.mmproj else "")
    return dataclasses.replace(cfg, model=str(got.path), mmproj=mmproj, origin=got.origin)


def resolve_entries(mc: ModelsConfig, where: str, *, offline: bool = False, token: str | None = None) -> ModelsConfig:
    """A config file's references resolved to their files, each fetched now if it must be (the
    error names the entry): pulls come from the command line or the config file, never from a request."""
    entries = []
    for i, e in enumerate(mc.models):
        if e.local is not None:
            try:
                e = dataclasses.replace(e, local=resolve_config(e.local, offline=offline, token=token))
            except ModelLoadError as exc:
                raise ModelLoadError(f"{where}: models[{i}] ({e.id}): {exc.message}") from None
        entries.append(e)
    return dataclasses.replace(mc, models=tuple(entries))
