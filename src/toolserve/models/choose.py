"""Which GGUF of a repo to serve, as llama-server's `-hf owner/repo[:QUANT]` chooses: the file
tagged with the asked quantisation, else Q4_K_M, else Q8_0, else the first GGUF that is not a
projector; every part of a split model (`-00001-of-00003.gguf`); the projector (`mmproj`)
beside a vision model. Pure: a list of the repo's file names in, a `Choice` out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from toolserve.errors import ModelLoadError
from toolserve.models.files import SPLIT_RE

PREFERRED = ("Q4_K_M", "Q8_0")  # llama-server's order when no tag is given
# a projector's precision, best first (llama.cpp's converter writes f16 by default)
PROJECTOR_PREFERENCE = ("F16", "BF16", "Q8_0", "F32")
# quantisation tags as they appear in GGUF file names (llama.cpp's quantize names, Unsloth's UD- prefix)
_TAG = re.compile(
    r"(?:^|[-_.])((?:UD-)?(?:I?Q\d(?:_[0-9]+)?(?:_[A-Z]+)*|TQ\d_\d|MXFP4(?:_MOE)?|NVFP4|BF16|F16|FP16|F32|FP32))(?=[-.]|$)",
    re.IGNORECASE,
)
# llama.cpp's llama_ftype (general.file_type), for a file whose name carries no tag
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}


@dataclass(frozen=True)
class Choice:
    files: tuple[str, ...]  # the model: one file, or every part of a split model in order
    mmproj: str | None = None  # the projector beside it, if the repo has one
    quant: str | None = None  # the tag that chose it (None: the first GGUF)


def is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def is_projector(name: str) -> bool:
    return "mmproj" in PurePosixPath(name).name.lower()


def quant_of(name: str) -> str | None:
    """The quantisation tag in a GGUF file's name (`Qwen3-0.6B-Q4_K_M.gguf` -> Q4_K_M), upper-cased."""
    stem = PurePosixPath(name).name
    cut = SPLIT_RE.search(stem)
    stem = stem[: cut.start()] if cut else stem[:-5] if is_gguf(stem) else stem
    found = _TAG.findall(stem)
    return found[-1].upper() if found else None


def has_tag(name: str, tag: str) -> bool:
    """`name` carries `tag` as a whole word: Q4_K matches `x-Q4_K.gguf`, not `x-Q4_K_M.gguf`;
    Q4_0 not IQ4_0. Case-insensitive; a folder named for the tag counts."""
    pattern = rf"(?:^|[-_./]){re.escape(tag)}(?=[-./]|$)"
    return re.search(pattern, name[:-5] if is_gguf(name) else name, re.IGNORECASE) is not None


def _parts(first: str, names: Sequence[str], repo: str) -> tuple[str, ...]:
    """Every part of the split model whose first part is `first`, in order; all must be there."""
    cut = SPLIT_RE.search(first)
    if cut is None:
        return (first,)
    prefix, count = first[: cut.start()], int(cut.group(2))
    wanted = [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    have = {n.lower(): n for n in names}
    missing = [w for w in wanted if w.lower() not in have]
    if missing:
        raise ModelLoadError(f"{repo}: the split model {first} lacks {len(missing)} of its {count} parts ({missing[0]} ...)")
    return tuple(have[w.lower()] for w in wanted)


def models_in(names: Sequence[str]) -> list[str]:
    """The model GGUFs among `names`: projectors left out, a split model named by its first part."""
    out = []
    for n in sorted(names):
        if not is_gguf(n) or is_projector(n):
            continue
        cut = SPLIT_RE.search(n)
        if cut is None or int(cut.group(1)) == 1:
            out.append(n)
    return out


def _projector(names: Sequence[str], model: str) -> str | None:
    found = sorted(n for n in names if is_gguf(n) and is_projector(n))
    if not found:
        return None
    folder = str(PurePosixPath(model).parent)
    near = [n for n in found if str(PurePosixPath(n).parent) == folder] or found
    for tag in PROJECTOR_PREFERENCE:
        tagged = [n for n in near if has_tag(n, tag)]
        if tagged:
            return tagged[0]
    return near[0]


def choose(names: Sequence[str], quant: str | None, repo: str) -> Choice:
    """The files to fetch and load for `repo[:quant]` among its file names."""
    models = models_in(names)
    if not models:
        raise no_gguf(repo, names)
    if quant:
        picked = [m for m in models if has_tag(m, quant)]
        if not picked:
            tags = sorted({t for t in (quant_of(m) for m in models) if t})
            have = f"it has {', '.join(tags)}" if tags else f"its GGUF files are {', '.join(models[:8])}"
            raise ModelLoadError(f"{repo} has no GGUF tagged {quant}: {have}")
        tag: str | None = quant
    else:
        tag = next((t for t in PREFERRED if any(has_tag(m, t) for m in models)), None)
        picked = [m for m in models if has_tag(m, tag)] if tag else models
    first = min(picked, key=lambda m: (len(m), m))  # `x-Q4_K_M.gguf` before `sub/x-Q4_K_M-...`
    return Choice(_parts(first, names, repo), _projector(names, first), tag.upper() if tag else None)


def choose_file(names: Sequence[str], file: str, repo: str) -> Choice:
    """The named `file` of `repo` (all parts when it is part of a split model) and the projector
    beside it; an error listing the repo's GGUFs when it has no such file."""
    if file not in names:
        shown = ", ".join(models_in(names)[:12]) or "none"
        raise ModelLoadError(f"{repo} has no file {file} (its GGUF models: {shown})")
    if not is_gguf(file):
        raise ModelLoadError(f"{repo}/{file} is not a GGUF file")
    cut = SPLIT_RE.search(file)
    first = file if cut is None else f"{file[: cut.start()]}-00001-of-{cut.group(2)}.gguf"
    return Choice(_parts(first, names, repo), None if is_projector(file) else _projector(names, first), quant_of(first))


def no_gguf(repo: str, names: Sequence[str]) -> ModelLoadError:
    """The error for a repo without a GGUF: what it holds, and where GGUF conversions are listed."""
    shown = ", ".join(sorted(names)[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    holds = f"it holds {shown}" if names else "it holds no files"
    return ModelLoadError(
        f"{repo} has no GGUF file ({holds}); toolserve runs GGUF models: pick a GGUF conversion of it, "
        f"e.g. from https://huggingface.co/models?other=base_model:quantized:{repo}"
    )
