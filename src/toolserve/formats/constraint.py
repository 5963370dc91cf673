"""A family's constraint for a request: its trigger + body + close, from the same declaration
its parser reads (`Trigger`, `Spec`), after its reasoning block when it has one.

- `required` (tool_choice "required" or a named function): the answer is calls from its first
  token, after an optional reasoning block; with the reasoning opened by the template, the
  grammar holds from the reasoning's close on.
- `lazy` (tool_choice "auto"): the model writes freely until it writes one of the family's
  call markers; from that marker on only valid calls follow (llama.cpp's lazy grammars).

- `upstream_lazy` / `required(upstream=True)`: the same as one grammar for a server that arms
  nothing itself (vLLM, raw mode): its own free text up to the first marker.

Both return a `CallConstraint`: Lark text (llguidance's dialect) and the triggers a lazy one
waits for. The grammar always starts with the trigger itself, so whichever marker the model
wrote is fed to it from its first character. Pure text: special tokens come in as ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import Unsupported
from ..types import ToolSpec
from .base import Format, Trigger
from .grammar import Writer, alt, generic_json_schema, json_rule, lit, optional_newline, rx, seq, text_until

BLANK = "/[ \\t\\n]*/"  # between a reasoning block and the calls
LEADING = '" "?'  # before a call: a marker written as its first token may carry a space (` functools`)
# a grammar sent upstream says it is llguidance's Lark: xgrammar refuses it, so vLLM never takes it for its own
UPSTREAM = "%llguidance {}\n"


@dataclass(frozen=True)
class CallConstraint:
    grammar: str  # Lark, `start` rule
    triggers: tuple[tuple[str, bool], ...] = ()  # (marker, lead): free text until one; () holds from the start
    quiet: tuple[str, str] | None = None  # (open, close): no trigger counts between these (reasoning)
    quiet_first: bool = False  # the answer starts inside `quiet` (the template opened the reasoning)


def has_grammar(t: Trigger) -> bool:
    return hasattr(t.body, "grammar")


def canonical(fmt: Format) -> Trigger:
    """The trigger the family's renderer writes: its first one that has a grammar."""
    for t in fmt.GRAMMAR.triggers:
        if has_grammar(t):
            return t
    raise Unsupported(f"constrained tool calls are not available for the '{fmt.FORMAT_ID}' tool format", param="tool_choice")


def block(w: Writer, t: Trigger, tools: Sequence[ToolSpec], parallel: bool, opened: bool = False) -> tuple[str, bool]:
    """One block opened by `t` (its marker first, unless the body writes a lead marker itself,
    or `opened`: the marker was read already; a layout newline after it and before the close,
    which every reader skips), and whether it holds several calls."""
    body = t.body.grammar(w, tools, parallel)  # type: ignore[attr-defined]
    head = "" if t.lead else seq("" if opened else w.mark(t.marker), optional_newline())
    tail = seq(optional_newline(), w.mark(t.close)) if t.close else ""
    return w.rule("block", seq(head, body.expr, tail)), body.many


def calls(w: Writer, fmt: Format, first: Trigger, tools: Sequence[ToolSpec], parallel: bool, opened: bool = False) -> str:
    """The answer's calls, the first block opened by `first` (`opened`: after its marker): with
    `parallel`, more blocks of the family's own (canonical) kind after it (also where a block
    holds a list: the readers take both). The family's wrap goes around them all (the first
    block's marker may be its opening), or, with no close, before each block (GigaChat's
    message header)."""
    wrap = fmt.GRAMMAR.calls_wrap
    each = ""
    if wrap is not None and not wrap[1]:
        each = f"({alt([w.mark(o) for o in wrap[0]])})?"
    head, _ = block(w, first, tools, parallel, opened)
    out = head if opened else seq(each, head)
    if parallel:
        again, _ = block(w, canonical(fmt), tools, parallel)
        out = f'{out} ("\\n"? {LEADING} {seq(each, again)})*'
    if wrap is None or not wrap[1]:
        return out
    opens, close = wrap
    closing = f"({w.mark(close)})?"
    if opened or first.marker in opens:  # the opening was the trigger, or is behind us: the block follows
        return seq(out, closing)
    return seq(f"{alt([w.mark(o) for o in opens])}?", out, closing)


def required(fmt: Format, tools: Sequence[ToolSpec], parallel: bool, *, thinking_open: bool, reasoning: bool = True,
             specials: Mapping[str, int] | None = None, upstream: bool = False) -> CallConstraint:
    """Only calls: from the start, or after the reasoning block: the template's (free text up
    to its close), or, where the model may reason (`reasoning`), one it opens itself. A model
    that was not asked to reason is not offered a block to wander into. `upstream`: one grammar
    that arms nothing (see `upstream_lazy`)."""
    w = Writer(specials)
    header = UPSTREAM if upstream else ""
    if fmt.FORMAT_ID == "generic_json":
        return CallConstraint(f"{header}start: {json_rule(generic_json_schema(tools, parallel, auto=False))}\n")
    own = getattr(fmt, "required_grammar", None)
    if own is not None:  # a family whose reasoning is not a block of markers (Harmony's channels)
        return CallConstraint(w.grammar(own(w, tools, parallel, thinking_open or reasoning), header=header))
    body = calls(w, fmt, canonical(fmt), tools, parallel)
    if fmt.REASONING is None or not (thinking_open or reasoning):
        return CallConstraint(w.grammar(seq(LEADING, body), header=header))
    open_, close = fmt.REASONING
    if thinking_open and upstream:  # the template opened it: free text to its close, then calls
        return CallConstraint(w.grammar(seq(text_until(w, close), BLANK, body), header=header))
    if thinking_open:  # the template opened it: free until its close, which the grammar starts with
        return CallConstraint(w.grammar(seq(w.mark(close), BLANK, body)), ((close, False),))
    return CallConstraint(w.grammar(seq(f"({seq(w.mark(open_), text_until(w, close), BLANK)})?", LEADING, body), header=header))


def lazy(fmt: Format, tools: Sequence[ToolSpec], parallel: bool, *, thinking_open: bool = False,
         specials: Mapping[str, int] | None = None) -> CallConstraint:
    """Free text until a call marker; from the marker on, valid calls only. Markers that prose
    holds too (`Trigger.lazy` false: a fence) arm nothing."""
    w = Writer(specials)
    if fmt.FORMAT_ID == "generic_json":  # the whole answer is JSON: a call list or a plain response
        return CallConstraint(f"start: {json_rule(generic_json_schema(tools, parallel, auto=True))}\n")
    quiet = None
    if fmt.REASONING is not None and not fmt.GRAMMAR.calls_in_reasoning:
        quiet = fmt.REASONING  # its reasoning spells the call syntax out: no call before it closes
    own = getattr(fmt, "lazy_grammar", None)
    if own is not None:
        start, triggers = own(w, tools, parallel)
        return CallConstraint(w.grammar(start), triggers, quiet, thinking_open)
    armed = [t for t in fmt.GRAMMAR.triggers if t.lazy and has_grammar(t)]
    if not armed:
        canonical(fmt)  # says why
    starts = [calls(w, fmt, t, tools, parallel) for t in armed]
    return CallConstraint(w.grammar(alt(starts)), tuple((t.marker, t.lead) for t in armed), quiet, thinking_open)


def upstream_lazy(fmt: Format, tools: Sequence[ToolSpec], parallel: bool, *, thinking_open: bool = False,
                  specials: Mapping[str, int] | None = None) -> str:
    """`lazy` as one grammar for an upstream that arms nothing itself (vLLM's guidance backend
    compiles llguidance's Lark as the local engine does): free text, or free text up to the
    first call marker (a lazy lexeme ends at its first match) and calls from there on, then
    text that holds no marker; a lead marker only where the answer starts (free text may not
    start with one). A reasoning block
    of a family that keeps calls out of it comes first, opened by the template or the model."""
    if fmt.FORMAT_ID == "generic_json" or getattr(fmt, "lazy_grammar", None) is not None:
        raise Unsupported(f"the '{fmt.FORMAT_ID}' tool format has no grammar for tool_choice auto on an upstream", param="tool_choice")
    w = Writer(specials)
    armed = [t for t in fmt.GRAMMAR.triggers if t.lazy and has_grammar(t)]
    if not armed:
        canonical(fmt)  # says why
    quiet = fmt.REASONING if fmt.REASONING is not None and not fmt.GRAMMAR.calls_in_reasoning else None
    heads = [t.marker for t in armed if t.lead] + ([quiet[0]] if quiet and not thinking_open else [])
    free = "/(.|\\n)*/"
    if heads:  # text that starts, after blank space, with none of them
        free += f" & ~/[ \\t\\r\\n]*({'|'.join(rx(m) for m in heads)})(.|\\n)*/"
    text = w.terminal("text", free)
    # after the calls, text that holds no marker: a model that wrapped its calls in a fence
    # closes it (Qwen2.5-Coder writes ```json, its <tool_call> blocks, ```), where calls alone
    # leave it only another call or the end of its turn, and it wrote call after call. Its
    # first character is no blank and no marker's first: the blank before it is the literal
    # layout the calls are separated by, so the lexer (which takes the longest text) keeps
    # "\n<tool_call>" the way to the next call
    markers = [t.marker for t in armed if not t.lead]
    firsts = "".join(sorted({re_class(t.marker[0]) for t in armed}))
    tail = f"/[^ \\t\\r\\n{firsts}](.|\\n)*/ & ~/(.|\\n)*({'|'.join(rx(m) for m in markers)})(.|\\n)*/"
    after = f'("\\n"? {LEADING} {w.terminal("tail", tail)})?' if markers else ""
    options = [text]
    for t in armed:
        if t.lead:
            options.append(seq(BLANK, calls(w, fmt, t, tools, parallel)))  # calls from the start: no fence to close
        else:
            options.append(seq(_arm(w, text, t.marker), calls(w, fmt, t, tools, parallel, opened=True), after))
    answer = alt(options)
    if quiet is not None:
        open_, close = quiet
        thought = text_until(w, close)
        answer = seq(thought if thinking_open else f"({seq(BLANK, w.mark(open_), thought)})?", w.rule("answer", answer))
    return w.grammar(answer, header=UPSTREAM)


def re_class(c: str) -> str:
    """One character as it stands in a regex character class."""
    return "\\" + c if c in "\\]^-[" else c


def _arm(w: Writer, text: str, marker: str) -> str:
    """Free text and the first `marker` after it; a marker that is one special token also as
    that token (no text lexeme matches a special token)."""
    lazy = w.lazy("arm", seq(text, lit(marker)))
    if marker not in w.specials:
        return lazy
    return alt([lazy, seq(text, f"<[{w.specials[marker]}]>")])


def upstream_ends(grammar: str, ends: Sequence[int]) -> str:
    """An upstream grammar that lets the answer end on the model's own end-of-turn tokens:
    llguidance on vLLM allows only the tokenizer's EOS where a grammar may end, and a chat
    model's end of turn is often another token (`<|im_end|>` where EOS is `<|endoftext|>`):
    without it the model can end no answer, and writes call after call to max_tokens."""
    if not ends:
        return grammar
    lines = grammar.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("start: "))
    # a newline before it too (a model ends a call block with one, then its turn), one only: a
    # weak model offered free blank space pads with newlines until max_tokens
    lines[at] = f"start: ({lines[at][len('start: '):]}) (\"\\n\"? {alt([f'<[{t}]>' for t in ends])})?"
    return "\n".join(lines)
