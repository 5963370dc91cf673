"""All format families by id, and `auto` detection from a chat template.

Adding a family = adding a module under `families/` and a line in `_MODULES`.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

from ..errors import InvalidRequest
from .base import Format

log = logging.getLogger(__name__)

_MODULES = (
    "hermes", "llama3_json", "llama3_builtin", "function_tag", "pythonic", "llama4_pythonic",
    "gemma3_tool_code", "mistral", "mistral_v11", "qwen3_coder", "deepseek_v3", "deepseek_v31",
    "glm45", "kimi_k2", "minimax_m2", "seed_oss", "gpt_oss", "granite", "command_r",
    "firefunction", "phi4_mini", "lfm2", "functiongemma", "gemma4", "generic_json",
    "internlm2", "jamba", "hunyuan", "xlam", "apertus", "gigachat3",
    "deepseek_v32", "deepseek_v4", "minimax_m3",
)

FORMATS: dict[str, Format] = {
    name: importlib.import_module(f"{__package__}.families.{name}").FORMAT for name in _MODULES
}


def get_format(format_id: str) -> Format:
    """The family for `format_id`; InvalidRequest naming the known ids otherwise."""
    try:
        return FORMATS[format_id]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise InvalidRequest(f"unknown tool format {format_id!r}; known: {known}", param="tool_format") from None


def _deepseek(src: str) -> str:
    """calls with a ```json fence or a `function` type are V3's, else V3.1's"""
    return "deepseek_v3" if "```json" in src or "function<｜tool▁sep｜>" in src else "deepseek_v31"


def _deepseek_dsml(src: str) -> str:
    """`function_calls` blocks are V3.2's, else V4's"""
    return "deepseek_v32" if "function_calls" in src else "deepseek_v4"


def _llama3(src: str) -> str:
    """pythonic example calls, or `<function=` without the JSON prompt, else Llama 3 JSON"""
    if "func_name1(" in src or "[func_name" in src:
        return "pythonic"
    if "<function=" in src and "Given the following functions" not in src:
        return "function_tag"
    return "llama3_json"


# (markers that must all appear, format id or a function of the template), most specific first
_MARKERS: tuple[tuple[tuple[str, ...], object], ...] = (
    (("<|channel|>",), "gpt_oss"),
    (("<|constrain|>",), "gpt_oss"),
    (("]<]minimax[>[",), "minimax_m3"),  # M3's namespace token before every tag
    (("<mm:think>",), "minimax_m3"),  # forks' M3 template: M2's call block with M3's thinking tags
    (("<minimax:tool_call>",), "minimax_m2"),
    (("<seed:tool_call>",), "seed_oss"),
    (("<|action_start|>",), "internlm2"),
    (("<|bom|>",), "jamba"),
    (("<|extra_0|>",), "hunyuan"),
    (("<|tools_prefix|>",), "apertus"),
    (("<|inner_prefix|>",), "apertus"),
    (("<|role_sep|>", "function call"), "gigachat3"),
    (("<|tool_calls_section_begin|>",), "kimi_k2"),
    (("｜DSML｜",), _deepseek_dsml),  # `dsml_token = "｜DSML｜"`: V3.2 writes function_calls, V4 tool_calls
    (("<｜tool▁sep｜>",), _deepseek),
    (("<arg_key>",), "glm45"),
    (("<function=", "<parameter="), "qwen3_coder"),
    (("<start_function_call>",), "functiongemma"),
    (("<|tool_call>",), "gemma4"),
    (("[ARGS]",), "mistral_v11"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<|START_ACTION|>",), "command_r"),
    (("<|tool_call_start|>",), "lfm2"),
    (("<|python_start|>",), "llama4_pythonic"),
    (("functools",), "firefunction"),
    (("<|tool|>",), "phi4_mini"),
    (("<|tool_call|>",), "granite"),
    (("tool_code",), "gemma3_tool_code"),
    (("xLAM",), "xlam"),  # "You are developed by Salesforce xLAM team."
    (("<tool_call>",), "hermes"),
    (("<|python_tag|>",), _llama3),
    (("Environment: ipython",), _llama3),
    (("<function=",), "function_tag"),
    (("[func_name1(",), "pythonic"),
    (("<|im_start|>",), "hermes"),  # plain ChatML without tool markers: Hermes style works best
    (("<start_of_turn>",), "gemma3_tool_code"),
)

_ARCHITECTURES = {
    "gemma3": "gemma3_tool_code", "gemma3n": "gemma3_tool_code", "gemma4": "gemma4",
    "llama": "llama3_json", "llama4": "llama4_pythonic", "qwen2": "hermes", "qwen3": "hermes",
    "qwen3moe": "hermes", "qwen3next": "qwen3_coder", "deepseek2": "deepseek_v3", "deepseek3": "deepseek_v3",
    "glm4moe": "glm45", "gpt-oss": "gpt_oss", "gpt_oss": "gpt_oss", "granite": "granite",
    "granitemoe": "granite", "cohere2": "command_r", "command-r": "command_r", "phi3": "phi4_mini",
    "lfm2": "lfm2", "seed_oss": "seed_oss", "minimax-m2": "minimax_m2", "minimax_m2": "minimax_m2",
    "internlm2": "internlm2", "jamba": "jamba", "hunyuan-moe": "hunyuan",
    "apertus": "apertus",
}


# families whose GGUF templates are plain ChatML (no tool markers): the architecture wins
# over the ChatML fallback
_CHATML_ARCHITECTURES = {"internlm2": "internlm2"}


@dataclass(frozen=True)
class Detection:
    """Which family `auto` picks and why: `rule` is "template", "template+architecture",
    "architecture" or "fallback"; `why` says it in a sentence."""

    format_id: str
    rule: str
    why: str
    markers: tuple[str, ...] = ()


def explain_detection(template_source: str | None, architecture: str | None) -> Detection:
    """The family for a chat template and architecture, with the rule that chose it."""
    src = template_source or ""
    arch = (architecture or "").lower()
    for markers, result in _MARKERS:
        if all(m in src for m in markers):
            shown = " and ".join(repr(m) for m in markers)
            if markers == ("<|im_start|>",) and arch in _CHATML_ARCHITECTURES:
                picked = _CHATML_ARCHITECTURES[arch]
                return Detection(picked, "template+architecture", f"the chat template is plain ChatML ({shown}, no "
                                 f"tool markers) and the architecture {architecture!r} is {picked}'s", markers)
            if callable(result):
                picked = result(src)
                why = f"the chat template contains {shown}; {result.__doc__}: {picked}"
            else:
                picked = str(result)
                why = f"the chat template contains {shown}"
            return Detection(picked, "template", why, markers)
    if arch in _ARCHITECTURES:
        return Detection(_ARCHITECTURES[arch], "architecture",
                         f"no known marker in the chat template; the architecture {architecture!r} maps to it")
    return Detection("generic_json", "fallback", "no known marker in the chat template and the architecture "
                     f"{architecture or '(none)'!r} maps to no family: the JSON answer format fits any model")


def detect_format(template_source: str | None, architecture: str | None) -> str:
    """Format id from the chat template's marker strings, else from the architecture."""
    found = explain_detection(template_source, architecture)
    log.info("tool format %s picked: %s", found.format_id, found.why)
    return found.format_id
