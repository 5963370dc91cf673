"""A parser's deltas as a client sees them: neighbours of one kind joined into one delta
(`merge_deltas`), and the message that concatenating them all gives (`rebuild`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..types import ContentDelta, Delta, ReasoningDelta, ToolCall, ToolCallArgs, ToolCallStart


@dataclass
class ParsedMessage:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def rebuild(deltas: Sequence[Delta]) -> ParsedMessage:
    """The message a client gets by concatenating `deltas`."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[str]] = {}
    heads: dict[int, ToolCallStart] = {}
    for d in deltas:
        if isinstance(d, ContentDelta):
            content.append(d.text)
        elif isinstance(d, ReasoningDelta):
            reasoning.append(d.text)
        elif isinstance(d, ToolCallStart):
            heads[d.index] = d
            calls[d.index] = []
        else:
            calls[d.index].append(d.fragment)
    return ParsedMessage(
        "".join(content),
        "".join(reasoning),
        [ToolCall(heads[i].id, heads[i].name, "".join(calls[i])) for i in sorted(heads)],
    )


def _run_key(d: Delta) -> tuple[type, int] | None:
    """Neighbouring deltas with the same key join into one (None: never joined)."""
    if isinstance(d, ToolCallArgs):
        return ToolCallArgs, d.index
    return None if isinstance(d, ToolCallStart) else (type(d), -1)


def merge_deltas(deltas: list[Delta]) -> list[Delta]:
    """Joins neighbouring deltas of the same kind (one piece of text per kind per feed).

    Each run is joined once: adding its pieces one at a time copies the text so far on every
    piece, which is quadratic when one feed holds many (a long text full of failed markers)."""
    if len(deltas) < 2:  # most feeds while streaming
        return deltas
    merged: list[Delta] = []
    for key, group in itertools.groupby(deltas, _run_key):
        run = list(group)
        first = run[0]
        if key is None or len(run) == 1:
            merged.extend(run)
        elif isinstance(first, ToolCallArgs):
            merged.append(ToolCallArgs(first.index, "".join(d.fragment for d in run if isinstance(d, ToolCallArgs))))
        elif isinstance(first, ContentDelta):
            merged.append(ContentDelta("".join(d.text for d in run if isinstance(d, ContentDelta))))
        else:
            merged.append(ReasoningDelta("".join(d.text for d in run if isinstance(d, ReasoningDelta))))
    return merged
