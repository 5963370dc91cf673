"""Ollama's model routes: GET /api/tags, POST /api/show, GET /api/ps, GET /api/version, the
names clients send (`name:tag`), loading and unloading by keep_alive, and the routes of a
model store toolserve does not keep (/api/pull, /api/push, /api/create, /api/copy,
/api/delete, /api/blobs), which answer an error that says so.

A model is listed as `ID:latest` (Ollama clients expect a tag and send the name back); a name
that ends in `:latest` is served by the model of that ID, and `--model-map` patterns see the
name as the client sent it.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from toolserve import __version__
from toolserve.api.deps import RegistryDep
from toolserve.api.ollama.schemas import ShowRequest
from toolserve.errors import ModelBusy, ModelNotFound, ToolserveError, Unsupported
from toolserve.formats.base import Format
from toolserve.models.files import gguf_metadata, resolve_model
from toolserve.serving.embeddings import EmbeddingModel
from toolserve.serving.entries import Entry, LocalModel
from toolserve.serving.registry import ModelRegistry

router = APIRouter()

OLLAMA_API_VERSION = "0.33.0"  # the Ollama release whose API (docs/api.md, api/types.go) this follows
FOREVER = "9999-12-31T23:59:59Z"  # expires_at of a model that stays loaded
LATEST = ":latest"
MIB = 1024 * 1024
# llama.cpp's file types (general.file_type) by number, as Ollama names them in quantization_level
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS",
    21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}


def created_at(at: float | None = None) -> str:
    """A time as Ollama writes it: RFC 3339 in UTC with nanoseconds."""
    now = time.time() if at is None else at
    whole = datetime.datetime.fromtimestamp(int(now), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{int((now % 1) * 1e9):09d}Z"


def tagged(model_id: str) -> str:
    """An id as Ollama lists it: with a tag (`:latest` unless it has one)."""
    return model_id if ":" in model_id.rsplit("/", 1)[-1] else model_id + LATEST


@dataclass(frozen=True)
class ResolveName:
    """The model a request's name resolved to, and the name to answer with (the client's own)."""

    entry: Entry
    name: str


def resolve(registry: ModelRegistry, name: str | None) -> ResolveName:
    """The model of an Ollama name: as given (ids and --model-map patterns), else without its
    `:latest`; none: the default model. Unknown: Ollama's 404, with how to serve the name."""
    if not name:
        entry = registry.default_entry()
        return ResolveName(entry, tagged(entry.model_id or ""))
    try:
        return ResolveName(registry.resolve(name), name)
    except ModelNotFound as exc:
        if name.endswith(LATEST) and len(name) > len(LATEST):
            try:
                return ResolveName(registry.resolve(name[: -len(LATEST)]), name)
            except ModelNotFound:
                pass
        hint = exc.message.split("; ", 1)[-1]  # which ids are served, and how to serve this name with one
        raise ModelNotFound(f"model '{name}' not found: {hint}", param="model") from None


def embedding_name(request: Request, registry: ModelRegistry, name: str | None) -> str | None:
    """The id an Ollama name gives /api/embed: an embedding model's or a served model's, with
    or without its `:latest`; unknown names are left for the embeddings route's 404."""
    own = getattr(request.app.state, "embedding_models", {})
    if not name or name in own:
        return name
    bare = name[: -len(LATEST)] if name.endswith(LATEST) else name
    if bare in own:
        return bare
    try:
        return resolve(registry, name).entry.model_id
    except ToolserveError:
        return name


async def load_for(registry: ModelRegistry, found: ResolveName, keep: float | None) -> float:
    """Load a local model if it is not (seconds it took) and give it the request's keep_alive."""
    if not isinstance(found.entry, LocalModel):
        return 0.0
    started = time.perf_counter()
    await registry.pipeline(found.entry)
    registry.keep_alive_for(found.entry, keep)
    return time.perf_counter() - started


async def unload_for(registry: ModelRegistry, found: ResolveName) -> None:
    """keep_alive 0 with nothing to answer: unload the model now, or once its requests are done."""
    entry = found.entry
    if not isinstance(entry, LocalModel):
        return
    held = entry.base or entry
    if held.state != "loaded" or not held.reloadable:
        return
    try:
        await registry.unload(held.id)
    except ModelBusy:
        registry.keep_alive_for(held, 0.0)  # the reaper unloads it once idle


# -- what a model is ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _header(path: str, mtime: float) -> dict[str, Any]:
    return gguf_metadata(path)


def header(path: str) -> dict[str, Any]:
    """A GGUF's metadata (the vocabulary left out), read once per file version."""
    try:
        return _header(path, Path(path).stat().st_mtime)
    except (OSError, ToolserveError):
        return {}


def path_of(entry: Entry | EmbeddingModel) -> str | None:
    if isinstance(entry, EmbeddingModel):
        return entry.embedder.path
    if isinstance(entry, LocalModel):
        try:
            return str(resolve_model(entry.cfg.model))
        except ToolserveError:
            return None
    return None


def details(path: str | None) -> dict[str, Any]:
    meta = header(path) if path else {}
    arch = str(meta.get("general.architecture", ""))
    file_type = meta.get("general.file_type")
    return {
        "parent_model": "",
        "format": "gguf" if path else "upstream",
        "family": arch,
        "families": [arch] if arch else None,
        "parameter_size": str(meta.get("general.size_label", "")),
        "quantization_level": FILE_TYPES.get(file_type, str(file_type or "")) if isinstance(file_type, int) else "",
    }


THINKING_SWITCHES = ("enable_thinking", "reasoning_effort", "thinking")


def can_think(model: Any) -> bool | None:
    """Whether a model (a pipeline, or a raw upstream) thinks: its family has reasoning markers
    and its chat template opens them or has a thinking switch. None: not known (passthrough)."""
    fmt, template = getattr(model, "fmt", None), getattr(model, "template", None)
    if not isinstance(fmt, Format) or template is None:
        return None
    if fmt.REASONING is None:
        return False
    source = template.source
    return fmt.REASONING[0] in source or any(s in source for s in THINKING_SWITCHES)


def capabilities(entry: Entry | EmbeddingModel) -> list[str]:
    """Ollama's capabilities: what clients (Copilot, Continue, Open WebUI) switch features on by.
    A local model's images, FIM and reasoning are known once it is loaded."""
    if isinstance(entry, EmbeddingModel):
        return ["embedding"]
    out = ["completion", "tools"]
    if not isinstance(entry, LocalModel):
        return [*out, "thinking"] if can_think(entry) else out
    pipe = entry.pipeline
    if pipe is None:
        return [*out, "embedding"] if entry.cfg.embeddings else out
    info = pipe.engine.info
    out += ["insert"] if info.fim is not None else []
    out += ["vision"] if info.vision else []
    out += ["thinking"] if can_think(pipe) else []
    out += ["embedding"] if getattr(pipe.engine, "embedder", None) is not None and not pipe.adapters else []
    return out


def id_of(entry: Entry | EmbeddingModel) -> str:
    return entry.id if isinstance(entry, EmbeddingModel) else str(entry.model_id)


def listing(entry: Entry | EmbeddingModel) -> dict[str, Any]:
    model_id = id_of(entry)
    path = path_of(entry)
    stat = Path(path).stat() if path else None
    # a stand-in digest: the file's path, size and time (hashing gigabytes for a listing is too slow)
    digest = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime}".encode() if stat else model_id.encode()).hexdigest()
    return {
        "name": tagged(model_id),
        "model": tagged(model_id),
        "modified_at": created_at(stat.st_mtime if stat else time.time()),
        "size": stat.st_size if stat else 0,
        "digest": digest,
        "details": details(path),
        "capabilities": capabilities(entry),
    }


def served(request: Request, registry: ModelRegistry) -> list[Entry | EmbeddingModel]:
    own: dict[str, EmbeddingModel] = getattr(request.app.state, "embedding_models", {})
    return [*(e for e in registry.entries if e.model_id is not None), *own.values()]


@router.get("/api/tags")
async def tags(request: Request, registry: RegistryDep) -> dict[str, Any]:
    return {"models": [listing(e) for e in served(request, registry)]}


def find(request: Request, registry: ModelRegistry, name: str | None) -> tuple[Entry | EmbeddingModel, str]:
    own: dict[str, EmbeddingModel] = getattr(request.app.state, "embedding_models", {})
    bare = name[: -len(LATEST)] if name and name.endswith(LATEST) else name
    if bare and bare in own:
        return own[bare], name or bare
    found = resolve(registry, name)
    return found.entry, found.name


@router.post("/api/show")
async def show(req: ShowRequest, request: Request, registry: RegistryDep) -> dict[str, Any]:
    entry, _ = find(request, registry, req.model or req.name)
    path = path_of(entry)
    meta = dict(header(path)) if path else {}
    if not req.verbose:  # Ollama leaves long arrays out unless asked
        meta = {k: [] if isinstance(v, list) and len(v) > 5 else v for k, v in meta.items()}
    pipe = entry.pipeline if isinstance(entry, LocalModel) else None
    n_ctx = pipe.engine.info.n_ctx if pipe is not None else entry.embedder.n_ctx if isinstance(entry, EmbeddingModel) else None
    arch = meta.get("general.architecture")
    if arch and n_ctx:
        # the context this server serves it with: clients (Copilot, Continue) size prompts by it
        meta[f"{arch}.context_length"] = n_ctx
    template = pipe.template.source if pipe is not None else ""
    fim = pipe.engine.info.fim if pipe is not None else None
    if fim is not None:
        # what `suffix` does, in Ollama's template words: clients (Continue) look for ".Suffix" to
        # know a model completes between a prefix and a suffix
        piece = pipe.engine.token_piece  # type: ignore[union-attr]
        pre, suf, mid = (piece(t).decode("utf-8", "replace") for t in (fim.pre, fim.suf, fim.mid))
        template += f"\n{{{{- /* fill-in-the-middle */ -}}}}{{{{ if .Suffix }}}}{pre}{{{{ .Prompt }}}}{suf}{{{{ .Suffix }}}}{mid}{{{{ end }}}}"
    params = f"{'num_ctx':<30} {n_ctx}" if n_ctx else ""
    return {
        "modelfile": f"# Modelfile generated by toolserve\nFROM {path or id_of(entry)}\n" + (f"PARAMETER num_ctx {n_ctx}\n" if n_ctx else ""),
        "parameters": params,
        "template": template,
        "details": details(path),
        "model_info": meta,
        "capabilities": capabilities(entry),
        "modified_at": created_at(Path(path).stat().st_mtime if path else time.time()),
    }


def expires_at(m: LocalModel) -> str:
    limit = m.idle_limit
    if limit is None:
        return FOREVER
    left = limit if m.busy else max(0.0, limit - (time.monotonic() - m.last_used))
    return created_at(time.time() + left)


@router.get("/api/ps")
async def ps(request: Request, registry: RegistryDep) -> dict[str, Any]:
    """The models in memory: loaded local models (and their adapter ids), embedding models."""
    out = []
    for e in served(request, registry):
        if isinstance(e, LocalModel):
            if e.state != "loaded" or e.pipeline is None:
                continue
            info = e.pipeline.engine.info
            where = info.placement
            vram = sum(d.memory_mb for d in where.devices) * MIB if where is not None else 0
            row = {**listing(e), "expires_at": expires_at(e.base or e), "size_vram": vram, "context_length": info.n_ctx}
            row["size"] = e.estimate or row["size"]
        elif isinstance(e, EmbeddingModel):
            row = {**listing(e), "expires_at": FOREVER, "size_vram": 0, "context_length": e.embedder.n_ctx}
        else:
            continue
        del row["modified_at"], row["capabilities"]
        out.append(row)
    return {"models": out}


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version() -> dict[str, str]:
    return {"version": OLLAMA_API_VERSION, "toolserve": __version__}


# -- a model store toolserve does not keep ----------------------------------------------------------
def not_managed(action: str) -> ToolserveError:
    return Unsupported(
        f"toolserve does not manage models over HTTP ({action}): it serves the GGUF files it was started with. "
        "Start it with --model PATH (or --config models.yaml), and use --model-map 'NAME=ID' to answer other names.",
    )


@router.post("/api/pull")
async def pull() -> None:
    raise not_managed("pull")


@router.post("/api/push")
async def push() -> None:
    raise not_managed("push")


@router.post("/api/create")
async def create() -> None:
    raise not_managed("create")


@router.post("/api/copy")
async def copy() -> None:
    raise not_managed("copy")


@router.api_route("/api/delete", methods=["DELETE", "POST"])
async def delete() -> None:
    raise not_managed("delete")


@router.api_route("/api/blobs/{digest}", methods=["HEAD", "POST"])
async def blobs(digest: str) -> None:
    raise not_managed("blobs")

