"""The streaming parser: a family's `Grammar` run over model output, piece by piece.

`Format.new_parser()` (formats/base.py) returns a `StreamParser`; non-streaming parsing is
`feed(whole) + finish()`, the same code path, so any split of the same text gives the same
message.

How the parser works: text is scanned in the current *state* (content or reasoning) for the
markers of that state's transition table; text before a marker is labelled with the state
it was written in; a possible partial marker at the end of a piece is held back. A call
marker hands the text to a *body* reader (json_bodies.py, markup_bodies.py, ...) that emits the
call through the parser's sink methods as soon as the name is known to be an offered tool. A
body that fails before it emitted anything gives its raw text back, labelled with the state it
interrupted (so a fake `<tool_call>` inside reasoning stays reasoning); a body that fails or is
cut off after its call started closes the call's arguments with what parsed
(`close_json_prefix`: open strings and brackets closed, never a key or value added), drops the
rest of that block up to its closing marker, and logs it.

Whitespace: each content or reasoning *segment* (text between structural markers) is
stripped at both ends; segments of the same kind are joined with a newline.

An answer wrapper (`Grammar.answer_wrap`, Granite's `<response>`…`</response>`) is removed only
where it opens right after the reasoning closes, and its close only when nothing but whitespace
and dropped markers follows it; the close is held back until that is known.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..types import ContentDelta, Delta, ReasoningDelta, ToolCallArgs, ToolCallStart, ToolSpec
from .deltas import merge_deltas
from .jsonstream import close_json_prefix
from .scan import CONTENT, FAIL, MORE, REASONING, may_grow_into, skip_ws

if TYPE_CHECKING:  # the parser runs what base.py declares; base.py's Format makes parsers
    from .base import Body, Grammar, Trigger

log = logging.getLogger(__name__)

_NO_WRAP, _WRAP_MAY, _WRAP_IN, _WRAP_HELD = 0, 1, 2, 3  # answer_wrap: none, may open, open, close held
TAG_MAX = 64  # how far a dropped tag's end may stand from its prefix (Grammar.drop_tags)


class MarkerTable:
    """Markers of one state: a regex finding the earliest, and the prefixes to hold back."""

    def __init__(self, acts: dict[str, tuple[str, Any]]) -> None:
        self.acts = acts
        # longest first, so `<tool_call>` wins over `<tool_call` style overlaps
        markers = sorted(acts, key=len, reverse=True)
        self.regex = re.compile("|".join(map(re.escape, markers))) if markers else None
        self.prefixes = {m[:i] for m in markers for i in range(1, len(m))}
        self.maxlen = max((len(m) for m in markers), default=0)
        firsts = {m[0] for m in markers}
        self.first_re = re.compile("[" + "".join(map(re.escape, sorted(firsts))) + "]") if firsts else None

    def hold_from(self, buf: str, pos: int) -> int:
        """Index from which buf may be the start of a marker (len(buf) if none)."""
        n = len(buf)
        if self.first_re is None:
            return n
        start = max(pos, n - self.maxlen + 1)
        m = self.first_re.search(buf, start)
        while m is not None:
            j = m.start()
            if buf[j:] in self.prefixes:
                return j
            m = self.first_re.search(buf, j + 1)
        return n


def _close_args(prefix: str, index: int) -> str:
    try:
        return close_json_prefix(prefix)
    except ValueError:
        # a body streamed a key without its value: a bug; the arguments must stay valid JSON
        log.error("tool call %d: arguments end in a dangling key: %r", index, prefix[-80:])
        for fill in ('": null', ": null", "null", '"": null'):
            try:
                tail = fill + close_json_prefix(prefix + fill)
                json.loads(prefix + tail)
                return tail
            except ValueError:
                continue
        return "}"


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class _Segment:
    """Whitespace bookkeeping of one kind of text (content or reasoning)."""

    __slots__ = ("any", "pending", "started")

    def __init__(self) -> None:
        self.started = False  # non-whitespace text emitted in the current segment
        self.pending = ""  # trailing whitespace held until more text follows
        self.any = False  # any text of this kind emitted at all


class StreamParser:
    """Incremental parser for one model output; see the module docstring."""

    def __init__(self, grammar: Grammar, tools: Sequence[ToolSpec] = (), thinking_open: bool = False,
                 id_factory: Callable[[], str] = new_call_id) -> None:
        self._g = grammar
        self._tools = {t.name: t for t in tools}
        self._new_id = id_factory
        self._buf = ""
        self._state = REASONING if thinking_open else CONTENT
        self._lead_ok = not thinking_open
        self._seg = {CONTENT: _Segment(), REASONING: _Segment()}
        self._out: list[Delta] = []
        self._body: Body | None = None
        self._trigger: Trigger | None = None
        self._block_raw: list[str] = []
        self._block_prev = CONTENT
        self._block_emitted = False
        self._closing: str | None = None  # close marker expected next
        self._skipping: str | None = None  # dropping a broken block up to this marker
        self._calls = 0
        self._ids: set[str] = set()  # the ids given so far: each call's must be new
        self._open_args: list[str] | None = None
        self._wrap = _NO_WRAP
        self._wrap_ws: list[str] = []  # whitespace read after a held wrapper close

    # -- public ----------------------------------------------------------------------------

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        self._run(final=False)
        return self._drain()

    def finish(self) -> list[Delta]:
        self._run(final=True)
        if self._open_args is not None:  # a body left a call open at end of output
            self.abort_call()
        return self._drain()

    # -- sink (called by bodies) -----------------------------------------------------------

    def allowed(self, name: str) -> bool:
        return bool(name) and (not self._tools or name in self._tools)

    def schema(self, name: str) -> dict[str, Any]:
        tool = self._tools.get(name)
        return tool.parameters if tool is not None else {}

    def start_call(self, name: str, call_id: str | None = None) -> None:
        if self._open_args is not None:
            self.abort_call()
        self._block_emitted = True
        if not call_id or call_id in self._ids:  # the model's own id, unless it wrote it twice
            call_id = self._new_id()
        self._ids.add(call_id)
        self._out.append(ToolCallStart(self._calls, call_id, name))
        self._open_args = []

    def call_args(self, fragment: str) -> None:
        if fragment and self._open_args is not None:
            self._open_args.append(fragment)
            self._out.append(ToolCallArgs(self._calls, fragment))

    def end_call(self) -> None:
        if self._open_args is not None and not self._open_args:
            self.call_args("{}")
        self._open_args = None
        self._calls += 1

    def abort_call(self) -> None:
        """Closes the open call's arguments as the model wrote them so far (never raises).

        Open strings, arrays and objects are closed; no key or value is added: the bodies
        write a member's key only together with the start of its value.
        """
        if self._open_args is None:
            return
        log.info("tool call %d: arguments broke off; keeping what parsed", self._calls)
        self.call_args(_close_args("".join(self._open_args), self._calls))
        self.end_call()

    def emit_text(self, kind: str, text: str) -> None:
        self._block_emitted = True
        self._emit(kind, text)

    # -- the loop --------------------------------------------------------------------------

    def _run(self, final: bool) -> None:
        buf, pos = self._buf, 0
        while True:
            if self._body is not None:
                pos, progressed = self._run_body(buf, pos, final)
            elif self._skipping is not None:
                pos, progressed = self._skip(buf, pos, final)
            elif self._closing is not None:
                pos, progressed = self._close(buf, pos, final)
            else:
                pos, progressed = self._scan(buf, pos, final)
            if not progressed:
                break
        self._buf = buf[pos:]

    def _scan(self, buf: str, pos: int, final: bool) -> tuple[int, bool]:
        n = len(buf)
        if pos >= n:
            return pos, False
        state = self._state
        if state == CONTENT and self._wrap in (_WRAP_MAY, _WRAP_HELD):
            step = self._wrap_step(buf, pos, final)
            if step is not None:
                return step
        if state == CONTENT and self._lead_ok and self._g.leads:
            j = skip_ws(buf, pos)
            if j == n:  # only whitespace so far: it starts the segment, where it is dropped
                self._emit(state, buf[pos:j])
                return n, n > pos
            for t in self._g.leads:
                if buf.startswith(t.marker, j):
                    self._open_block(t, buf[pos:j], "")
                    return j, True
                if not final and may_grow_into(buf, j, t.marker):
                    return pos, False
            self._lead_ok = False
        table = self._g.table(state)
        m = table.regex.search(buf, pos) if table.regex is not None else None
        if m is not None and not final and len(buf) - m.start() < table.maxlen and buf[m.start():] in table.prefixes:
            # a whole marker that may still grow into a longer one (`<|channel>` / `<|channel>thought`)
            self._emit(state, buf[pos:m.start()])
            return m.start(), m.start() > pos
        if m is not None and table.acts[m.group()][0] == "tag":
            self._emit(state, buf[pos:m.start()])
            end = buf.find(table.acts[m.group()][1], m.end(), m.end() + TAG_MAX)
            if end >= 0:  # the whole tag: dropped
                return end + len(table.acts[m.group()][1]), True
            if not final and len(buf) - m.end() < TAG_MAX:
                return m.start(), m.start() > pos  # its end may still arrive
            self._emit(state, m.group())  # no tag after all: its text
            return m.end(), True
        if m is not None:
            self._emit(state, buf[pos:m.start()])
            self._act(m.group(), table.acts[m.group()])
            return m.end(), True
        end = n if final else table.hold_from(buf, pos)
        if end > pos:
            self._emit(state, buf[pos:end])
            if not final and state == CONTENT:
                self._lead_ok = False
        return end, end > pos

    def _act(self, marker: str, act: tuple[str, Any]) -> None:
        kind, trigger = act
        if kind == "open":
            self._boundary(CONTENT)
            self._state = REASONING
        elif kind == "reopen":  # dropped before any reasoning text, else it is reasoning text
            if self._seg[REASONING].started:
                self._emit(REASONING, marker)
        elif kind == "close":
            self._boundary(REASONING)
            self._state = CONTENT
            self._lead_ok = True
            if self._g.answer_wrap:
                self._wrap = _WRAP_MAY
        elif kind == "unwrap":  # the wrapper's close: held until what follows it is known
            if self._wrap == _WRAP_IN:
                self._wrap = _WRAP_HELD
            else:
                self._emit(CONTENT, marker)
        elif kind == "call":
            self._open_block(trigger, "", marker)

    def _wrap_step(self, buf: str, pos: int, final: bool) -> tuple[int, bool] | None:
        """The answer wrapper's open right after the reasoning, or what follows its held close."""
        assert self._g.answer_wrap is not None
        opener, closer = self._g.answer_wrap
        n, j = len(buf), skip_ws(buf, pos)
        if self._wrap == _WRAP_MAY:  # right after the reasoning: the content segment is new
            if buf.startswith(opener, j):
                self._wrap = _WRAP_IN
                return j + len(opener), True
            if not final and may_grow_into(buf, j, opener):
                self._emit(CONTENT, buf[pos:j])  # leading whitespace: dropped
                return j, j > pos
            self._wrap = _NO_WRAP
            return None
        for m in self._g.drop:  # the close was followed by an end-of-turn marker
            if buf.startswith(m, j):
                self._wrap_ws = []
                return j + len(m), True
        if j == n or (not final and any(may_grow_into(buf, j, m) for m in self._g.drop)):
            if final:
                return n, n > pos
            self._wrap_ws.append(buf[pos:j])  # read once; written after the close if text follows
            return j, j > pos
        self._wrap = _WRAP_IN  # text follows: the close was the model's text
        self._emit(CONTENT, closer + "".join(self._wrap_ws))
        self._wrap_ws = []
        return pos, True

    def _open_block(self, trigger: Trigger, ws: str, marker: str) -> None:
        seg = self._seg[self._state]
        self._block_raw = [seg.pending, ws, marker]
        seg.pending = ""
        self._block_prev = self._state
        self._block_emitted = False
        self._trigger = trigger
        self._body = trigger.body(self)

    def _run_body(self, buf: str, pos: int, final: bool) -> tuple[int, bool]:
        assert self._body is not None and self._trigger is not None
        new, status = self._body.advance(buf, pos, final)
        if final and status == MORE and new == pos:  # a body must conclude at end of output
            status = FAIL
        if not self._block_emitted:
            self._block_raw.append(buf[pos:new])
        if status == MORE:
            return new, new > pos
        trigger, body = self._trigger, self._body
        self._body = None
        if status == FAIL and not self._block_emitted:
            log.info("not a valid tool call, kept as text: %r", "".join(self._block_raw)[:200])
            self._state = self._block_prev
            self._emit(self._state, "".join(self._block_raw))
            self._lead_ok = False
            return new, True
        if self._open_args is not None:
            self.abort_call()
        self._boundary(CONTENT)
        self._boundary(REASONING)
        self._state = body.next_state or CONTENT
        self._lead_ok = self._state == CONTENT
        if status == FAIL:
            log.info("tool call block broke off after a call; dropping the rest of the block")
            self._skipping = trigger.close
            if self._skipping is None:
                self._lead_ok = False
        else:
            self._closing = trigger.close
        return new, True

    def _close(self, buf: str, pos: int, final: bool) -> tuple[int, bool]:
        close, n = self._closing, len(buf)
        assert close is not None
        j = skip_ws(buf, pos)
        if buf.startswith(close, j):
            self._closing = None
            return j + len(close), True
        if not final and may_grow_into(buf, j, close):
            # whitespace after a block starts a new segment, where it is dropped: read it once
            return j, j > pos
        self._closing = None
        if j < n and may_grow_into(buf, j, close):  # the close marker cut by the end of the output
            return n, True
        return pos, True

    def _skip(self, buf: str, pos: int, final: bool) -> tuple[int, bool]:
        close = self._skipping
        assert close is not None
        j = buf.find(close, pos)
        if j >= 0:
            self._skipping = None
            return j + len(close), True
        keep = len(buf) if final else max(pos, len(buf) - len(close) + 1)
        if final:
            self._skipping = None
        return keep, keep > pos or final

    # -- text emission ---------------------------------------------------------------------

    def _emit(self, kind: str, text: str) -> None:
        if not text:
            return
        seg = self._seg[kind]
        if not seg.started:
            text = text.lstrip()
            if not text:
                return
            if seg.any:
                text = "\n" + text
            seg.started = seg.any = True
        body = text.rstrip()
        if body:
            self._out.append((ContentDelta if kind == CONTENT else ReasoningDelta)(seg.pending + body))
            seg.pending = text[len(body):]
        else:
            seg.pending += text

    def _boundary(self, kind: str) -> None:
        seg = self._seg[kind]
        seg.started = False
        seg.pending = ""

    def _drain(self) -> list[Delta]:
        out, self._out = self._out, []
        return merge_deltas(out)
