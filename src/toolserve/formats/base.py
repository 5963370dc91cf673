"""The family interface: everything a family file uses, in one place.

A family is a `Format` object: data (format id, reasoning markers, the role tool results go
in), a `Grammar` (which markers switch between content, reasoning and tool-call bodies) and
the prompt-side renderers. A `Trigger` opens a tool-call block whose body is a `Spec`: the body
class declared once, which reads the block (called with the parser's `Sink`) and writes its
grammar (`Spec.grammar`). A family with a syntax of its own writes a `Body`: `advance` reads
what it can of the block and says MORE, DONE or FAIL.

`Format.new_parser()` gives the streaming parser (formats/stream.py) that runs the grammar.
`__all__` is what a family imports from here; the states, statuses and scanning helpers in it
(CONTENT, MORE, `skip_ws`, ...) are scan.py's, which the parser shares.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..types import ToolCall, ToolSpec
from .deltas import ParsedMessage, rebuild
from .jsonstream import dumps, escape_str, loads
from .scan import CONTENT, DONE, FAIL, MORE, REASONING, may_grow_into, skip_ws
from .stream import MarkerTable, StreamParser, new_call_id

__all__ = [
    "CONTENT", "DONE", "FAIL", "MORE", "REASONING", "ArgsWriter", "Body", "BodyFactory", "Format", "Grammar", "PrefixChoice",
    "Sink", "Spec", "Trigger", "Written", "call_arguments", "may_grow_into", "skip_ws", "tool_dicts",
]


# ---- the body protocol -----------------------------------------------------------------


class Sink(Protocol):
    """What a body may call on the parser."""

    def allowed(self, name: str) -> bool: ...
    def schema(self, name: str) -> dict[str, Any]: ...
    def start_call(self, name: str, call_id: str | None = None) -> None: ...
    def call_args(self, fragment: str) -> None: ...
    def end_call(self) -> None: ...
    def abort_call(self) -> None: ...
    def emit_text(self, kind: str, text: str) -> None: ...


class Body(Protocol):
    """Reads one tool-call block. `advance` returns (new position, MORE | DONE | FAIL)."""

    next_state: str | None

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]: ...


BodyFactory = Callable[[Sink], Body]


@dataclass(frozen=True)
class Written:
    """What a body's `grammar` writes: the Lark expression of one block's calls, and whether
    that block holds several calls (a JSON list) or one (the family repeats its blocks)."""

    expr: str
    many: bool = False


class Spec:
    """A body declared once, for both directions. Called with a parser's sink it is the reader
    of one block; `grammar(writer, tools, many)` writes what that reader reads, for the offered
    tools (formats/constraint.py makes the family's constraint of it). `params` go to both;
    `write` holds what only the writing needs: the layout the family's own renderer uses where
    the reader takes several."""

    def __init__(self, body: Any, *, write: dict[str, Any] | None = None, **params: Any) -> None:
        self.body = body
        self.params = params
        self.write = write or {}

    def __call__(self, sink: Sink) -> Body:
        return self.body(sink, **self.params)  # type: ignore[no-any-return]

    def grammar(self, w: Any, tools: Sequence[ToolSpec], many: bool) -> Written:
        write = dict(self.write)
        pad = write.pop("pad", "")  # layout around the block's calls that the readers skip
        out: Written = self.body.grammar(w, tools, many, **self.params, **write)
        if not pad:
            return out
        around = f"{json.dumps(pad)}?"
        return Written(f"{around} {out.expr} {around}", out.many)


@dataclass(frozen=True)
class Trigger:
    """A marker that opens a tool-call block, the body reading it and its closing marker.

    `lead=True`: only recognised at the start of a content segment (bare JSON `{` or a
    pythonic `[`), and the marker is left for the body to read.
    """

    marker: str
    body: BodyFactory
    close: str | None = None
    lead: bool = False
    lazy: bool = True  # under tool_choice auto, the grammar holds from this marker on (no: it is also prose)


@dataclass(frozen=True)
class Grammar:
    """The transition table of a family, as data."""

    triggers: tuple[Trigger, ...] = ()
    reasoning_open: tuple[str, ...] = ()
    reasoning_close: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()  # markers removed wherever they stand (end-of-turn tokens)
    # (open, close) around the answer right after the reasoning (Granite's <response>): removed
    # only there, the close only when nothing but whitespace or dropped markers follows it
    answer_wrap: tuple[str, str] | None = None
    # False: call markers inside the reasoning are reasoning text (Seed-OSS spells its call syntax
    # out while it thinks and closes the reasoning before it calls; MiniMax M2 likewise)
    calls_in_reasoning: bool = True
    # (opens, close) the renderer writes around all of an answer's call blocks (DeepSeek's calls
    # begin/end, Kimi's section): the parser reads or drops them; a constraint writes them
    calls_wrap: tuple[tuple[str, ...], str] | None = None
    # (prefix, end): markup dropped wherever it stands, from its prefix to the first `end` within
    # stream.TAG_MAX characters (Command R's citations: `<co: 0>` ... `</co: 0:[1]>`)
    drop_tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        tables = {}
        for state in (CONTENT, REASONING):
            acts: dict[str, tuple[str, Any]] = {}
            for m in self.drop:
                acts[m] = ("drop", None)
            for prefix, end in self.drop_tags:
                acts[prefix] = ("tag", end)
            if state == CONTENT:
                for m in self.reasoning_open:
                    acts[m] = ("open", None)
                for m in self.reasoning_close:  # a stray close (prompt opened it): dropped
                    acts.setdefault(m, ("drop", None))
            else:
                for m in self.reasoning_open:  # repeated by the model after the template's
                    acts[m] = ("reopen", None)
                for m in self.reasoning_close:
                    acts[m] = ("close", None)
            for t in self.triggers:
                if not t.lead and (state == CONTENT or self.calls_in_reasoning):
                    acts[t.marker] = ("call", t)
            if state == CONTENT and self.answer_wrap:
                acts.setdefault(self.answer_wrap[1], ("unwrap", None))
            tables[state] = MarkerTable(acts)
        object.__setattr__(self, "_tables", tables)
        object.__setattr__(self, "_leads", tuple(t for t in self.triggers if t.lead))

    def table(self, state: str) -> MarkerTable:
        return self._tables[state]  # type: ignore[attr-defined,no-any-return]

    @property
    def leads(self) -> tuple[Trigger, ...]:
        return self._leads  # type: ignore[attr-defined,no-any-return]


class ArgsWriter:
    """Writes `{"k": v, ...}` for the open call, one member at a time: the canonical JSON
    arguments of a body whose syntax is not JSON (markup tags, `k:v`, Python calls)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.count = 0

    def key(self, key: str) -> None:
        self.sink.call_args(("{" if self.count == 0 else ", ") + '"' + escape_str(key) + '": ')
        self.count += 1

    def member(self, key: str, value: Any) -> None:
        self.key(key)
        self.sink.call_args(dumps(value))

    def close(self) -> None:
        self.sink.call_args("}" if self.count else "{}")
        self.sink.end_call()


class PrefixChoice:
    """Hands the block to the first option whose prefix the text starts with (after spaces).

    options: (prefix, body factory, consume the prefix?)
    """

    def __init__(self, sink: Sink, options: Sequence[tuple[str, BodyFactory, bool]]) -> None:
        self.sink = sink
        self.options = options
        self.body: Body | None = None
        self.next_state: str | None = None

    @classmethod
    def grammar(cls, w: Any, tools: Sequence[ToolSpec], many: bool, *, options: Sequence[tuple[str, BodyFactory, bool]],
                canonical: int = 0) -> Written:
        """The option the family writes (`canonical`, by default the first), with its prefix."""
        prefix, factory, consume = options[canonical]
        inner = factory.grammar(w, tools, many)  # type: ignore[attr-defined]
        return Written(f"{w.mark(prefix)} {inner.expr}" if consume and prefix else inner.expr, inner.many)

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        if self.body is None:
            i = skip_ws(buf, pos)
            if not final and any(may_grow_into(buf, i, p) for p, _, _ in self.options):
                return i, MORE  # still ambiguous; the whitespace is read (no marker starts with it)
            for prefix, factory, consume in self.options:
                if buf.startswith(prefix, i):
                    self.body = factory(self.sink)
                    pos = i + len(prefix) if consume else i
                    break
            else:
                return pos, FAIL
        new, status = self.body.advance(buf, pos, final)
        self.next_state = self.body.next_state
        return new, status


# ---- helpers and the family ------------------------------------------------------------


def tool_dicts(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools in the OpenAI `tools` shape, for prompts that show them as JSON."""
    out = []
    for t in tools:
        fn: dict[str, Any] = {"name": t.name}
        if t.description:
            fn["description"] = t.description
        fn["parameters"] = t.parameters or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": fn})
    return out


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """A history call's arguments as an object (they arrive as JSON text, maybe broken)."""
    try:
        value = loads(call.arguments) if call.arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Format:
    """One tool-call format family. Subclasses set the data and override the renderers."""

    FORMAT_ID: str = ""
    REASONING: tuple[str, str] | None = None  # (open, close) markers
    TOOL_RESULT_ROLE: str = "tool"  # role the result of a call goes back in
    GRAMMAR: Grammar = Grammar()

    def new_parser(self, tools: Sequence[ToolSpec] = (), thinking_open: bool = False,
                   id_factory: Callable[[], str] = new_call_id, calls: bool = True) -> StreamParser:
        """A streaming parser; `calls=False` splits reasoning only and leaves call syntax as text."""
        grammar = self.GRAMMAR if calls else self._no_calls_grammar()
        return StreamParser(grammar, tools, thinking_open and self.REASONING is not None, id_factory)

    def _no_calls_grammar(self) -> Grammar:
        cached = self.__dict__.get("_no_calls")
        if cached is None:
            cached = self.__dict__["_no_calls"] = dataclasses.replace(self.GRAMMAR, triggers=())
        return cached

    def parse(self, text: str, tools: Sequence[ToolSpec] = (), thinking_open: bool = False) -> ParsedMessage:
        """Non-streaming parse: one feed and finish."""
        p = self.new_parser(tools, thinking_open)
        return rebuild(p.feed(text) + p.finish())

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "\n".join(dumps(t) for t in tool_dicts(tools))

    def render_tool_call(self, call: ToolCall) -> str:
        return dumps({"name": call.name, "arguments": call_arguments(call)})

    def render_tool_result(self, name: str, call_id: str, content: str) -> str:
        return content
