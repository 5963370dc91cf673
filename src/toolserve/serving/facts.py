"""What /v1/models says about a local model besides its engine: where it came from (the
reference it was started with), its size on disk and quantisation, and the sampling defaults
a request gets from it. Read from the file's header, without loading it, so a model of a
--config file that is not loaded yet shows the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolserve.config import ModelConfig
from toolserve.errors import ModelLoadError
from toolserve.models import sampling
from toolserve.models.choose import FILE_TYPES, quant_of
from toolserve.models.files import find_mmproj, gguf_metadata, model_bytes, model_parts, resolve_model
from toolserve.serving.loader import is_bundled, sampling_defaults


@dataclass(frozen=True)
class Facts:
    reference: str | None  # owner/repo:QUANT, ollama:..., lmstudio:...; None for a path
    source: str  # hf | ollama | lmstudio | file | bundled
    size_bytes: int
    parts: int
    quantization: str | None
    sampling: dict[str, sampling.Default]
    vision: bool  # a projector is named or lies beside it (the loaded engine says for sure)

    def card(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "source": self.source, "size_bytes": self.size_bytes, "parts": self.parts,
            "quantization": self.quantization, "sampling_defaults": sampling.card(self.sampling), "vision": self.vision,
        }


def read_facts(cfg: ModelConfig, flags: dict[str, float]) -> Facts | None:
    """The facts of `cfg`'s model file; None when it cannot be read (the load says why)."""
    try:
        path = resolve_model(cfg.model)
        meta = gguf_metadata(path)
    except (ModelLoadError, OSError):
        return None
    origin = cfg.origin
    source = origin.source if origin is not None else "bundled" if is_bundled(path) else "file"
    file_type = meta.get("general.file_type")
    quant = quant_of(path.name) or (FILE_TYPES.get(file_type) if isinstance(file_type, int) else None)
    return Facts(
        origin.reference if origin is not None else None, source, model_bytes(path), len(model_parts(path)), quant,
        sampling_defaults(cfg, path, flags, meta), bool(cfg.mmproj or find_mmproj(path)),
    )
