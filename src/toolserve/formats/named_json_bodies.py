"""The body reader of calls written as a header naming the tool, then the arguments object:
`NamedJsonBody` (function_tag, mistral_v11, deepseek, kimi_k2, gpt_oss, apertus). The header's
spelling is the family's (`parse_header` reads it, `head` writes it); the arguments stream as
JSON once the name is known to be an offered tool.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..types import ToolSpec
from .base import DONE, FAIL, MORE, Sink, Written
from .grammar import Params, Writer, alt, json_value, seq
from .json_bodies import args_from_value
from .jsonstream import JsonReader, dumps
from .scan import skip_ws

log = logging.getLogger(__name__)


class NamedJsonBody:
    """`HEADER DELIM {args}`: `parse_header(header)` gives (name, id) or None."""

    next_state: str | None = None

    def __init__(self, sink: Sink, delim: str, parse_header: Callable[[str], tuple[str, str | None] | None],
                 max_header: int = 256, suffix: str = "```") -> None:
        self.sink = sink
        self.suffix = suffix
        self.delim = delim
        self.parse_header = parse_header
        self.max_header = max_header
        self.st = "header"
        self.reader: JsonReader | None = None
        self.name = ""
        self.call_id: str | None = None

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, delim: str,
                head: Callable[[Writer, str], str] | None = None, fence: tuple[str, str] | None = None, end: str = "",
                **_: Any) -> Written:
        """`head(name) delim {args} end` for each tool; `head` writes the family's header (by
        default the bare name), `fence` wraps the arguments (deepseek_v3's ```json block)."""
        options = []
        for i, t in enumerate(tools):
            params = Params.of(t, i)
            args = json_value(w, params.document(params.schema))
            if fence is not None:
                args = seq(w.mark(fence[0]), args, w.mark(fence[1]))
            options.append(w.rule("call", seq(head(w, t.name) if head else w.mark(t.name), w.mark(delim), args, w.mark(end))))
        return Written(alt(options))

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        if self.st == "header":
            i = skip_ws(buf, pos)  # a layout newline after the marker (constraint.block writes one)
            if i >= n:
                return pos, FAIL if final else MORE
            pos = i
            j = buf.find(self.delim, pos, pos + self.max_header + len(self.delim))
            if j < 0:
                return pos, FAIL if final or n - pos > self.max_header else MORE
            head = self.parse_header(buf[pos:j])
            if head is None or not self.sink.allowed(head[0]):
                if head is not None:
                    log.debug("%r is not an offered tool", head[0])
                return pos, FAIL
            self.name, self.call_id = head
            pos, self.st = j + len(self.delim), "fence"
        if self.st == "fence":  # optional ```json fence before the object (deepseek_v3)
            i = skip_ws(buf, pos)
            rest = buf[i:i + 3]
            if i >= n or (len(rest) < 3 and "```".startswith(rest)):
                return (pos, FAIL) if final else (i, MORE)
            if rest == "```":  # its language line is as short as a header
                nl = buf.find("\n", i, i + self.max_header)
                if nl < 0:
                    return (pos, FAIL) if final or n - i >= self.max_header else (i, MORE)
                i = nl + 1
            self.st = "open"
            pos = i
        if self.st == "open":
            i = skip_ws(buf, pos)
            if i >= n:
                return i, FAIL if final else MORE
            if buf[i] == "{":
                self.sink.start_call(self.name, self.call_id)
                self.st = "stream"
            elif buf[i] in '"n':
                self.st = "value"
            else:
                return pos, FAIL
            self.reader = JsonReader()
            pos = i
        if self.st in ("stream", "value"):
            r = self.reader
            assert r is not None
            pos = r.feed(buf, pos)
            if final and pos >= n:
                r.finish()
            if self.st == "stream":
                self.sink.call_args("".join(r.out))
                r.out.clear()
            if r.failed:
                if self.st == "stream":
                    self.sink.abort_call()
                return pos, FAIL
            if not r.done:
                return pos, MORE
            if self.st == "value":
                args = args_from_value(json.loads("".join(r.out)))
                if args is None:
                    return pos, FAIL
                self.sink.start_call(self.name, self.call_id)
                self.sink.call_args(dumps(args))
            self.sink.end_call()
            self.st = "after"
        # optional closing fence or tag
        i = skip_ws(buf, pos)
        k = len(self.suffix)
        rest = buf[i:i + k]
        if rest == self.suffix:
            return i + k, DONE
        if self.suffix.startswith(rest) and not final:
            return i, MORE  # whitespace after a call is dropped: read it once
        return pos, DONE
