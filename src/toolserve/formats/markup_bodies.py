"""Body readers for families whose calls are XML-ish tags: `XmlParamsBody` reads
`<function=n><parameter=k>raw value</parameter></function>` and its cousins (qwen3_coder,
seed_oss, minimax_m2, glm45, deepseek's DSML), each spelled by an `XmlSyntax`. Values are raw
text typed from the tool's schema; string values stream as they arrive, other types once
complete. Arguments go out as canonical JSON through `ArgsWriter`; `xml_value` writes a value
the way the reader takes it back.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..types import ToolSpec
from .base import DONE, FAIL, MORE, ArgsWriter, Sink, Written
from .grammar import Params, Writer, alt, lit, markup_value, members, optional_newline, seq
from .jsonstream import dumps, escape_str
from .scan import hold_from, may_grow_into_one, skip_ws
from .schema import coerce, guess, is_plain_string, prop_schema, types_of

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=64)
def _first_of(markers: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, markers)))


@dataclass(frozen=True)
class XmlSyntax:
    """The spelling of one XML-ish family. A `*_open` is a (prefix, end) pair around a name."""

    func_open: tuple[str, str] = ("<function=", ">")
    func_close: str | None = "</function>"
    param_open: tuple[str, str] = ("<parameter=", ">")
    value_open: str = ""  # glm45: `<arg_value>` after the key
    param_close: str = "</parameter>"
    strip_newline: bool = True  # one newline after the open tag and before the close is layout
    unquote: bool = False  # minimax: name="x"
    name_stops: tuple[str, ...] = ()  # glm45: the name also ends (unconsumed) at these
    value_stops: tuple[str, ...] = ()  # a value left unclosed also ends (unconsumed) at these
    string_attr: str = ""  # deepseek DSML: name="k" string="false" marks a JSON value (used without a schema)
    escaped: bool = False  # GLM 4.6/4.7: values may hold JSON's backslash escapes (`\n`, `\"`), decoded


_ATTR = re.compile(r'\s*"([^"]*)"((?:\s+[\w-]+="[^"]*")*)\s*\Z')
_PAIR = re.compile(r'([\w-]+)="([^"]*)"')


class XmlParamsBody:
    next_state: str | None = None

    def __init__(self, sink: Sink, syntax: XmlSyntax) -> None:
        self.sink = sink
        self.sx = syntax
        self.st = "func"
        self.calls = 0
        self.writer: ArgsWriter | None = None
        self.name = ""
        self.key = ""
        self.raw: list[str] = []
        self.streaming = False
        self.first = True  # nothing of the value seen yet
        self.held = ""  # a trailing newline that may be layout
        self.attrs: dict[str, str] = {}  # the attributes after the last name read (string_attr syntax)
        self.json_value = False  # the value is a JSON literal typed by the model, not by a schema
        self.pending_escape = ""  # a string's last backslash, until the character after it is known

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, syntax: XmlSyntax, per_block: bool = False,
                **_: Any) -> Written:
        """Each tool's function with its parameters in the syntax's tags, in the layout the
        renderers write (the newlines optional); a value follows its schema (`markup_value`).
        `per_block`: the family writes several functions in one block (MiniMax, DSML)."""
        sx, nl = syntax, optional_newline()
        stops = (sx.param_close, *sx.value_stops)

        def named(name: str) -> str:  # a name as the syntax spells it
            return lit(f'"{name}"' if sx.unquote or sx.string_attr else name)

        options = []
        for i, t in enumerate(tools):
            params = Params.of(t, i)

            def member(key: str, params: Params = params) -> str:
                schema = params.prop(key)

                def tag(head: str) -> str:
                    # the layout newline after the open tag belongs to the value (markup_value):
                    # a bounded text lexes it with itself, and one more here would let a second
                    # newline through that the reader keeps as text
                    return seq(w.mark(sx.param_open[0]), head, w.mark(sx.param_open[1]), nl if sx.value_open else "",
                               w.mark(sx.value_open))

                if not sx.string_attr:
                    return seq(tag(named(key)), markup_value(w, params, schema, stops, sx.param_close, sx.strip_newline, sx.escaped), nl)
                # DSML: string="true" before a raw string, "false" before a JSON value
                types, forms = types_of(schema), []
                if is_plain_string(schema) or "string" in types:
                    text = schema if is_plain_string(schema) else {}
                    forms.append(seq(tag(lit(f'"{key}" {sx.string_attr}="true"')), markup_value(w, params, text, stops, sx.param_close, sx.strip_newline)))
                if not is_plain_string(schema):
                    typed = {**schema, "type": sorted(types - {"string"})} if "string" in types and "type" in schema else schema
                    json = markup_value(w, params, typed, stops, sx.param_close, sx.strip_newline)
                    forms.append(seq(tag(lit(f'"{key}" {sx.string_attr}="false"')), json))
                return seq(alt(forms), nl)

            func = seq(w.mark(sx.func_open[0]), named(t.name), w.mark(sx.func_open[1]), nl,
                       members(w, params, member, ""), w.mark(sx.func_close or ""))
            options.append(w.rule("function", func))
        one = alt(options)
        if many and per_block:
            return Written(f"{one} ({nl} {one})*", True)
        return Written(one, per_block)

    def _name(self, text: str) -> str:
        text = text.strip()
        if self.sx.string_attr:
            m = _ATTR.match(text)
            self.attrs = dict(_PAIR.findall(m.group(2))) if m else {}
            return m.group(1) if m else ""
        if self.sx.unquote and len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            text = text[1:-1]
        return text

    def _read_name(self, buf: str, i: int, end: str, final: bool) -> tuple[int, str | None]:
        j = buf.find(end, i, i + 256)
        stop = j + len(end) if j >= 0 else -1
        for other in self.sx.name_stops:
            k = buf.find(other, i, i + 256)
            if k >= 0 and (j < 0 or k < j):
                j = stop = k
        if j < 0:
            if final and self.sx.name_stops and len(buf) - i <= 256:
                return len(buf), self._name(buf[i:])
            return i, None
        return stop, self._name(buf[i:j])

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        sx, n = self.sx, len(buf)
        while True:
            if self.st == "value":
                pos, status = self._value(buf, pos, final)
                if status != DONE:
                    return pos, status
                self.st = "params"
                continue
            i = skip_ws(buf, pos)
            if self.st == "func":
                prefix, end = sx.func_open
                if buf.startswith(prefix, i):
                    j, name = self._read_name(buf, i + len(prefix), end, final)
                    if name is None:
                        return (pos, FAIL if self.calls == 0 else DONE) if final or n - i > 256 else (i, MORE)
                    if not self.sink.allowed(name):
                        return pos, FAIL if self.calls == 0 else DONE
                    self.sink.start_call(name)
                    self.name, self.writer, self.st, pos = name, ArgsWriter(self.sink), "params", j
                    continue
                if not final and may_grow_into_one(buf, i, (prefix,)):
                    return i, MORE  # the whitespace before is read: no marker starts with it
                return pos, FAIL if self.calls == 0 else DONE
            # params
            prefix, end = sx.param_open
            assert self.writer is not None
            if buf.startswith(prefix, i):
                j, key = self._read_name(buf, i + len(prefix), end, final)
                if key is None:
                    if final or n - i > 256:
                        self._end_call()
                        return pos, DONE
                    return i, MORE
                if not key and sx.string_attr:  # attributes that do not parse: a broken call
                    self._end_call()
                    return pos, FAIL
                if sx.value_open:
                    k = skip_ws(buf, j)
                    if not buf.startswith(sx.value_open, k):
                        if not final and may_grow_into_one(buf, k, (sx.value_open,)):
                            return i, MORE
                        self._end_call()
                        return pos, DONE
                    j = k + len(sx.value_open)
                self._begin_value(key)
                pos, self.st = j, "value"
                continue
            if sx.func_close and buf.startswith(sx.func_close, i):
                self._end_call()
                pos, self.st = i + len(sx.func_close), "func"
                continue
            if not final and may_grow_into_one(buf, i, (prefix, sx.func_close or "")):
                return i, MORE
            self._end_call()  # tolerate a missing closing tag
            return pos, DONE

    def _end_call(self) -> None:
        assert self.writer is not None
        self.writer.close()
        self.writer = None
        self.calls += 1

    def _begin_value(self, key: str) -> None:
        self.key = key
        self.schema = prop_schema(self.sink.schema(self.name), key)
        # with no type from the schema, the model's own string="false" says the value is JSON
        self.json_value = bool(self.sx.string_attr) and not types_of(self.schema) \
            and self.attrs.get(self.sx.string_attr) == "false"
        self.streaming = is_plain_string(self.schema) and not self.json_value
        self.raw, self.first, self.held = [], True, ""
        assert self.writer is not None
        if self.streaming:  # a string streams from its key on; any other value is written whole
            self.writer.key(key)
            self.sink.call_args('"')

    def _text(self, text: str) -> None:
        if not text:
            return
        if self.streaming:
            if self.sx.escaped:  # a backslash at the end of a piece waits for the next
                text, self.pending_escape = unescape(self.pending_escape + text)
            self.sink.call_args(escape_str(text))
        else:
            self.raw.append(text)

    def _value(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        close = self.sx.param_close
        if self.first:
            if pos >= len(buf):
                return (pos, MORE) if not final else self._finish_value(pos, False)
            self.first = False
            if self.sx.strip_newline and buf[pos] == "\n":
                pos += 1
        # the first close or stop, in one search (one search per marker would each run to the end
        # of the text when that marker is missing, on every value)
        hit = _first_of((close, *self.sx.value_stops)).search(buf, pos)
        j, after = (hit.start(), len(close) if hit.group() == close else 0) if hit else (-1, 0)
        # without a close: up to a possible close tag still arriving (or cut short at the end of
        # the output, where it is not part of the value either)
        end = j if j >= 0 else min(hold_from(buf, pos, m) for m in (close, *self.sx.value_stops))
        chunk = buf[pos:end]
        if chunk:
            chunk, self.held = self.held + chunk, ""
            if self.sx.strip_newline and chunk.endswith("\n"):
                chunk, self.held = chunk[:-1], "\n"
            self._text(chunk)
        if j >= 0:
            return self._finish_value(j + after, True)
        if final:
            return self._finish_value(len(buf), False)
        return end, MORE

    def _finish_value(self, pos: int, complete: bool) -> tuple[int, int]:
        """Closes a string as far as it got; any other value only when the model finished it
        (a number or object cut by the end of the output is left out, never guessed)."""
        assert self.writer is not None
        if self.streaming:
            if self.pending_escape:
                self.sink.call_args(escape_str(self.pending_escape))
                self.pending_escape = ""
            self.sink.call_args('"')
        elif not complete:
            log.info("parameter %r cut off before its value ended; left out", self.key)
        elif self.json_value:
            self.writer.member(self.key, guess("".join(self.raw)))
        else:
            raw = "".join(self.raw)
            value = coerce(raw, self.schema)
            if self.sx.escaped and isinstance(value, str) and "\\" in raw:  # `{\"a\": 1}`: JSON escaped once more
                value = coerce(unescape(raw)[0], self.schema)
            self.writer.member(self.key, value)
        return pos, DONE


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "/": "/"}
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def unescape(text: str) -> tuple[str, str]:
    """JSON's short escapes decoded (others kept as written); a backslash ending the text is
    returned apart, to be read with what follows it."""
    held = ""
    if text.endswith("\\") and (len(text) - len(text.rstrip("\\"))) % 2:
        text, held = text[:-1], "\\"
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group()), text), held


def xml_value(value: Any, layout: bool = False) -> str:
    """A value as raw text inside a parameter tag: strings as they are, the rest as JSON.
    `layout`: the reader takes one newline after the open tag and one before the close as
    layout (`XmlSyntax.strip_newline`), so a string with a newline at either end gets both."""
    text = value if isinstance(value, str) else dumps(value)
    return f"\n{text}\n" if layout and (text.startswith("\n") or text.endswith("\n")) else text
