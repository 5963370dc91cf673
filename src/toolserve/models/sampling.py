"""Sampling defaults a model brings: what a request gets for a field it does not send.

In order, a later one winning: the protocol's own (temperature 1, the rest off); ours for a
local model, which end loops (`LOOP`: a repetition penalty and llama.cpp's DRY sampler); the
model card's recommendation for the bundled SmolLM2 (known by its file's hash, wherever a copy
lies); the GGUF's `general.sampling.*` keys (read as llama.cpp's common_init_sampler_from_model
reads them: the value's text parsed as a number); Ollama's parameters of an `ollama:` model;
the server's flags (`--temperature` ...).
Pure: metadata in, `Default`s out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "dry_multiplier")
PROTOCOL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0, "dry_multiplier": 0.0}
PROTOCOL_SOURCE = "protocol default"
# What ends loops, for a local model that sets neither: small models at any temperature, greedy
# included, otherwise loop to the end of the context. Measured on the bundled model's 24 everyday
# prompts (bench/everyday.py, bench/README.md): DRY alone (llama.cpp's "don't repeat yourself",
# at the multiplier its docs recommend) leaves lines repeated (its breakers end a span at each
# new line) and the penalty alone one answer over 400 tokens; both end every answer.
LOOP = {"repetition_penalty": 1.1, "dry_multiplier": 0.8}
LOOP_SOURCE = "toolserve (ends loops)"
# ...but the penalty counts every repeated token, a call's quotes and braces and the names and
# values it copies too: on Qwen2.5-Coder-0.5B it cost 3 of 39 calls under tool_choice auto and
# 2 of 30 under required (bench/real_tool_accuracy.py --variant). So a request that offers tools
# or asks for JSON gets DRY alone (its breakers end a span at quotes, colons and new lines), and so
# does a raw prompt continued (completions, infill, Ollama's raw or suffix): a list or code goes on
# with the tokens it has, which the penalty would push away from. The penalty is for prose only.
PROSE_ONLY = ("repetition_penalty",)
# llama.cpp's keys (gguf-py's Keys.General.SAMPLING_*) for the fields toolserve's sampler has
GGUF_KEYS = {
    "general.sampling.temp": "temperature",
    "general.sampling.top_p": "top_p",
    "general.sampling.top_k": "top_k",
    "general.sampling.min_p": "min_p",
    "general.sampling.penalty_repeat": "repetition_penalty",
}
# keys llama.cpp reads whose samplers toolserve's chain does not have (logged, not applied)
NOT_APPLIED = (
    "general.sampling.sequence", "general.sampling.penalty_last_n", "general.sampling.xtc_probability",
    "general.sampling.xtc_threshold", "general.sampling.mirostat", "general.sampling.mirostat_tau",
    "general.sampling.mirostat_eta",
)
# HuggingFaceTB/SmolLM2-135M-Instruct's model card generates with
# `model.generate(inputs, max_new_tokens=50, temperature=0.2, top_p=0.9, do_sample=True)`
BUNDLED_CARD = {"temperature": 0.2, "top_p": 0.9}
BUNDLED_SOURCE = "model card (HuggingFaceTB/SmolLM2-135M-Instruct)"
# what the API accepts for each field (api/openai/schemas.py): a key outside is ignored, not applied
_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 1 << 31), "min_p": (0.0, 1.0), "repetition_penalty": (1e-9, 10.0),
           "dry_multiplier": (0.0, 10.0)}
_NUMBER = re.compile(r"^\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Default:
    value: float
    source: str


def _number(raw: object, integer: bool) -> float | None:
    """A metadata value as llama.cpp reads it: its text (std::to_string, so a float32 0.95 is
    "0.950000") parsed as a number (strtof / strtol), so 0.6, "0.6" and 40 all count; booleans
    and arrays do not."""
    if isinstance(raw, bool) or raw is None or isinstance(raw, list | dict):
        return None
    m = _NUMBER.match(f"{raw:f}" if isinstance(raw, float) else str(raw))
    if not m:
        return None
    value = float(m.group(0))
    if integer:
        value = float(int(value))
    return value if math.isfinite(value) else None


def valid(name: str, value: float) -> bool:
    lo, hi = _RANGES[name]
    return lo <= value <= hi and not (name == "top_p" and value == 0.0)


def from_gguf(meta: Mapping[str, object]) -> tuple[dict[str, float], list[str]]:
    """The sampling fields a GGUF's header sets, and the keys found but not applied (with why)."""
    out: dict[str, float] = {}
    skipped = [f"{k} (no such sampler here)" for k in NOT_APPLIED if k in meta]
    for key, name in GGUF_KEYS.items():
        if key not in meta:
            continue
        value = _number(meta[key], integer=name == "top_k")
        if value is None or not valid(name, value):
            skipped.append(f"{key}={meta[key]!r} ({'not a number' if value is None else 'out of range'})")
            continue
        out[name] = value
    return out, skipped


def model_defaults(
    meta: Mapping[str, object], *, local: bool = False, bundled: bool = False, source_sampling: Mapping[str, float] | None = None,
    source_name: str = "", flags: Mapping[str, float] | None = None,
) -> dict[str, Default]:
    """Every sampling field's default for a model, with where it came from."""
    out = {name: Default(PROTOCOL[name], PROTOCOL_SOURCE) for name in FIELDS}
    if local:
        out.update({k: Default(v, LOOP_SOURCE) for k, v in LOOP.items()})
    if bundled:
        out.update({k: Default(v, BUNDLED_SOURCE) for k, v in BUNDLED_CARD.items()})
    keys = {name: key for key, name in GGUF_KEYS.items()}
    out.update({k: Default(v, f"gguf {keys[k]}") for k, v in from_gguf(meta)[0].items()})
    out.update({k: Default(v, source_name) for k, v in (source_sampling or {}).items() if k in PROTOCOL and valid(k, v)})
    out.update({k: Default(v, "--" + k.replace("_", "-")) for k, v in (flags or {}).items()})
    return out


def fill(defaults: Mapping[str, Default], *, prose: bool = True) -> dict[str, float]:
    """The values a request that sends none of a field gets, other than the protocol's own;
    `prose=False` (tools offered, JSON asked for, a raw prompt continued): not our PROSE_ONLY ones."""
    return {
        k: d.value for k, d in defaults.items()
        if d.source != PROTOCOL_SOURCE and (prose or d.source != LOOP_SOURCE or k not in PROSE_ONLY)
    }


def card(defaults: Mapping[str, Default]) -> dict[str, dict[str, object]]:
    """As /v1/models shows them: {field: {value, source}}."""
    return {k: {"value": int(d.value) if k == "top_k" else d.value, "source": d.source} for k, d in defaults.items()}
