"""The row type of the conformance corpora (corpus_<family>.py) and the list of corpora.

A row is one variant a peer server's parser suite accepts (or rejects), written as our own
data in toolserve's tools (formats_fixtures.TOOLS): the model's text, the expected content,
reasoning and calls, and the peer suite it comes from. `fmt` overrides the corpus module's
FORMAT_ID where one corpus covers two format ids (deepseek_v3 / deepseek_v31). A call is
(name, arguments), or (name, arguments, id) where the model writes the call's id itself
(Mistral) and the row checks it; a call without an id expects toolserve's own `call_…` id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    name: str
    text: str
    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str | None], ...] = ()
    source: str = ""
    thinking_open: bool = False
    fmt: str = ""


CORPORA = ("hermes", "deepseek", "gpt_oss", "qwen3_coder", "glm45", "mistral", "granite",
           "internlm2", "jamba", "hunyuan", "xlam", "apertus", "gigachat3",
           "deepseek_dsml", "kimi_k2", "minimax_m3")
CORPORA += ("command_r", "gemma4", "functiongemma", "generic_json", "function_tag", "firefunction",
            "gemma3_tool_code")
