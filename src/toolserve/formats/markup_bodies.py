"""Body readers for families whose arguments are not JSON.

- `XmlParamsBody`: `<function=n><parameter=k>raw value</parameter></function>` and its
  cousins (qwen3_coder, seed_oss, minimax_m2, glm45). Values are raw text typed from the
  tool's schema; string values stream as they arrive, other types once complete.
- `KvCallsBody`: `call:n{k:<esc>text<esc>,n:5}` (functiongemma, gemma4).

Both write canonical JSON arguments through `ArgsWriter`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..types import ToolSpec
from .base import DONE, FAIL, MORE, Sink, Written
from .grammar import Params, Writer, alt, kv_literals, lit, literal_value, markup_value, members, optional_newline, seq
from .jsonstream import MAX_DEPTH, dumps, escape_str, loads
from .schema import coerce, guess, is_plain_string, prop_schema, types_of

_WS = " \t\r\n"
log = logging.getLogger(__name__)


class ArgsWriter:
    """Writes `{"k": v, ...}` for the open call, one member at a time."""

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


def _skip_ws(buf: str, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _partial(buf: str, i: int, markers: tuple[str, ...]) -> bool:
    """buf[i:] (maybe empty) may still grow into one of `markers` (only their length is read)."""
    return any(len(buf) - i <= len(m) and m.startswith(buf[i:]) for m in markers if m)


@functools.lru_cache(maxsize=64)
def _first_of(markers: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, markers)))


def _hold_from(buf: str, start: int, marker: str) -> int:
    """First index >= start from which buf could still begin `marker`."""
    n = len(buf)
    for j in range(max(start, n - len(marker) + 1), n):
        if marker.startswith(buf[j:]):
            return j
    return n


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
                    return seq(w.mark(sx.param_open[0]), head, w.mark(sx.param_open[1]), nl if sx.value_open else "",
                               w.mark(sx.value_open), nl if sx.strip_newline else "")

                if not sx.string_attr:
                    return seq(tag(named(key)), markup_value(w, params, schema, stops, sx.param_close, sx.strip_newline), nl)
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
            i = _skip_ws(buf, pos)
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
                if not final and _partial(buf, i, (prefix,)):
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
                    k = _skip_ws(buf, j)
                    if not buf.startswith(sx.value_open, k):
                        if not final and _partial(buf, k, (sx.value_open,)):
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
            if not final and _partial(buf, i, (prefix, sx.func_close or "")):
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
        end = j if j >= 0 else min(_hold_from(buf, pos, m) for m in (close, *self.sx.value_stops))
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


# ---- call:name{k:v} ----------------------------------------------------------------------


class KvCallsBody:
    """`call:n{k:<esc>v<esc>,...}`, several per block; members stream one by one.

    Besides the family's `esc`-delimited strings, a value may be a JSON string (`k:"say \\"hi\\""`,
    Ollama reads it) or a single-quoted one (`k:'Paris'`, in SGLang's and Ollama's suites). A
    member ends at a comma, at the closing brace, or right after a string value closes (vLLM
    reads `k:<esc>a<esc>j:<esc>b<esc>` without commas). A stray `:` before `call:` is skipped
    (vLLM reads `<|tool_call>:call:…`). `close` is the block's closing marker, a special token no
    string holds: a string still open there ends at it, and a `}` just before it closes the call
    (Ollama repairs `{k:<esc>ls}<close>` the same way).
    """

    next_state: str | None = None

    def __init__(self, sink: Sink, esc: str, close: str = "") -> None:
        self.sink = sink
        self.esc = esc
        self.close = close
        self.st = "call"
        self.calls = 0
        self.name = ""
        self.writer: ArgsWriter | None = None
        self.member: list[str] = []
        self.depth = 0
        self.in_str = False  # inside an esc-delimited string
        self.in_json = ""  # the quote of the "JSON" or 'Python' string being read, if any
        self.json_esc = False  # the JSON string's last character was a backslash
        self.colon = False  # the current member's key is complete (`k:` seen at depth 0)
        self.value_blank = True  # nothing but spaces after the member's last `:` (or in it, with none)

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, esc: str, **_: Any) -> Written:
        """`call:n{k:v,...}` for each tool: bare keys, strings between `esc`, other values as
        JSON (`kv_literals`); one call per block, as the renderers write."""
        options, style = [], kv_literals(esc)
        for i, t in enumerate(tools):
            params = Params.of(t, i)

            def member(key: str, params: Params = params) -> str:
                return seq(lit(f"{key}:"), literal_value(w, params, params.prop(key), style))

            options.append(w.rule("call", seq(lit(f"call:{t.name}{{"), members(w, params, member, '","'), lit("}"))))
        return Written(alt(options))

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        while True:
            if self.st == "call":
                i = pos
                while i < n and buf[i] in _WS + ",:":
                    i += 1
                if buf.startswith("call:", i):
                    j = buf.find("{", i + 5, i + 5 + 256)
                    if j < 0:
                        if final or n - i > 256:
                            return pos, FAIL if self.calls == 0 else DONE
                        return i, MORE
                    name = buf[i + 5:j].strip()
                    if not self.sink.allowed(name):
                        return pos, FAIL if self.calls == 0 else DONE
                    self.sink.start_call(name)
                    self.name, self.writer = name, ArgsWriter(self.sink)
                    self.st, self.member, self.depth, self.value_blank = "args", [], 0, True
                    self.in_str = self.json_esc = self.colon = False
                    self.in_json = ""
                    pos = j + 1
                    continue
                if not final and _partial(buf, i, ("call:",)):
                    return i, MORE  # what was skipped (spaces, `,` and `:`) starts no marker
                return pos, FAIL if self.calls == 0 else DONE
            pos, status = self._args(buf, pos, final)
            if status != DONE:
                return pos, status

    def _add(self, text: str) -> None:
        """Appends to the member, keeping `value_blank` (re-reading the member there is quadratic)."""
        self.member.append(text)
        _, colon, tail = text.rpartition(":")
        self.value_blank = not tail.strip() and (bool(colon) or self.value_blank)

    def _string_closed(self) -> bool:
        """A value string closed: at depth 0 after `k:` it ends the member. False: broken."""
        if self.depth == 0 and self.colon:
            return self._emit_member()
        return True

    def _args(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        esc, n, i = self.esc, len(buf), pos
        while i < n:
            if self.in_str:
                j = buf.find(esc, i)
                # a close before the string's end (searched no further: that is once per string)
                k = buf.find(self.close, i, j + len(self.close) - 1 if j >= 0 else n) if self.close else -1
                if k >= 0:  # the block closes inside the string
                    return self._string_cut_by_close(buf[i:k], k)
                if j < 0:
                    keep = len(buf) if final else min(_hold_from(buf, i, m) for m in (esc, self.close or esc))
                    self._add(buf[i:keep])
                    i = keep
                    break
                self._add(buf[i:j + len(esc)])
                i, self.in_str = j + len(esc), False
                if not self._string_closed():
                    self.sink.abort_call()
                    return i, FAIL
                continue
            c = buf[i]
            if self.in_json:
                self._add(c)
                i += 1
                if self.json_esc:
                    self.json_esc = False
                elif c == "\\":
                    self.json_esc = True
                elif c == self.in_json:
                    self.in_json = ""
                    if not self._string_closed():
                        self.sink.abort_call()
                        return i, FAIL
                continue
            if buf.startswith(esc, i):
                self._add(esc)
                i, self.in_str = i + len(esc), True
                continue
            if self.close and buf.startswith(self.close, i):  # the block closed without `}`
                if self.depth or not self._emit_member():
                    self.sink.abort_call()
                else:
                    assert self.writer is not None
                    self.writer.close()
                self.calls += 1
                self.st = "call"
                return i, DONE
            if not final and n - i < max(len(esc), len(self.close)) and any(
                    m and m.startswith(buf[i:]) for m in (esc, self.close)):
                break
            if c == '"' or (c == "'" and self.value_blank):
                self.in_json = c  # a single quote opens a string only where a value starts
            elif c == ":" and self.depth == 0:
                self.colon = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]" and self.depth:
                self.depth -= 1
            elif c in ",}" and self.depth == 0:
                if not self._emit_member():
                    self.sink.abort_call()
                    return i, FAIL
                if c == "}":
                    assert self.writer is not None
                    self.writer.close()
                    self.calls += 1
                    self.st = "call"
                    return i + 1, DONE
                i += 1
                continue
            self._add(c)
            i += 1
        if final and i >= n:  # cut off: keep the members that parsed
            if self.in_str or self.in_json:  # a string cut short keeps what was written
                self._emit_member(close=self.esc if self.in_str else self.in_json)
            elif "".join(self.member).strip():  # any other value cut there is left out (`4` of `42`)
                log.info("argument cut off before its value ended; left out")
            self.sink.abort_call()
            self.calls += 1
            self.st = "call"
            return i, DONE
        return i, MORE

    def _string_cut_by_close(self, text: str, at: int) -> tuple[int, int]:
        """An esc string still open where the block's close marker stands: the string ends there,
        without a `}` written just before the marker, which closes the call."""
        member = ("".join(self.member) + text).rstrip()
        closes = self.depth == 0 and member.endswith("}")
        self.member = [member[:-1] if closes else member]
        self.in_str = False
        self._emit_member(close=self.esc)
        assert self.writer is not None
        if closes:
            self.writer.close()
        else:
            self.sink.abort_call()
        self.calls += 1
        self.st = "call"
        return at, DONE

    def _emit_member(self, close: str = "") -> bool:
        text = "".join(self.member).strip()
        self.member, self.colon, self.value_blank = [], False, True
        if not text:
            return True
        key, sep, value = text.partition(":")
        if not sep:
            return False
        key = key.strip()
        if len(key) >= 2 * len(self.esc) and key.startswith(self.esc) and key.endswith(self.esc):
            key = key[len(self.esc):-len(self.esc)]
        key = key.strip("\"'")
        schema = prop_schema(self.sink.schema(self.name), key)
        if close and not value.strip().startswith((self.esc, '"', "'")):
            return False  # only a top-level string is kept when cut
        try:
            parsed, end = parse_kv_value(value + close, _skip_ws(value, 0), self.esc, schema)
        except (ValueError, IndexError):
            return False
        if value[end:].strip() if not close else False:
            return False
        if close and not isinstance(parsed, str) and schema and not is_plain_string(schema):
            return False  # a typed value cut short is left out, never guessed
        assert self.writer is not None
        self.writer.member(key, parsed)
        return True


def parse_kv_value(s: str, i: int, esc: str, schema: dict[str, Any], depth: int = 1) -> tuple[Any, int]:
    """One value of the `k:v` syntax starting at s[i]; bare words and strings are typed from
    `schema` where it asks for something other than a string. `depth`: the containers around
    it in the arguments; one more than MAX_DEPTH is a ValueError (malformed), not a recursion."""
    if s.startswith(esc, i):
        j = s.index(esc, i + len(esc))
        text = s[i + len(esc):j]
        return (coerce(text, schema) if schema and not is_plain_string(schema) else text), j + len(esc)
    if s[i] == '"':
        text, end = json.JSONDecoder().raw_decode(s, i)
        return (coerce(text, schema) if schema and not is_plain_string(schema) else text), end
    if s[i] == "'":  # a Python-style string (SGLang's and Ollama's suites hold `k:'v'`)
        j = i + 1
        while s[j] != "'":
            j += 2 if s[j] == "\\" else 1
        text = s[i + 1:j].replace("\\'", "'")
        return (coerce(text, schema) if schema and not is_plain_string(schema) else text), j + 1
    if s[i] in "{[":
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        close = "}" if s[i] == "{" else "]"
        obj: Any = {} if close == "}" else []
        i = _skip_ws(s, i + 1)
        while s[i] != close:
            if close == "}":
                if s.startswith(esc, i) or s[i] == '"':  # a quoted key
                    key_value, i = parse_kv_value(s, i, esc, {})
                    key = str(key_value)
                    i = _skip_ws(s, i)
                    if s[i] != ":":
                        raise ValueError("expected ':'")
                    colon = i
                else:
                    colon = s.index(":", i)
                    key = s[i:colon].strip().strip("\"'")
                val, i = parse_kv_value(s, _skip_ws(s, colon + 1), esc, prop_schema(schema, key), depth + 1)
                obj[key] = val
            else:
                val, i = parse_kv_value(s, i, esc, schema.get("items") or {}, depth + 1)
                obj.append(val)
            i = _skip_ws(s, i)
            if s[i] == ",":
                i = _skip_ws(s, i + 1)
            elif s[i] != close:
                raise ValueError(f"expected ',' or {close!r}")
        return obj, i + 1
    j = i
    while j < len(s) and s[j] not in ",}]":
        j += 1
    word = s[i:j].strip()
    if not word:
        raise ValueError("missing value")
    if schema and not is_plain_string(schema):
        return coerce(word, schema), j
    try:
        return (loads(word) if not schema else word), j
    except ValueError:
        return word, j


Factory = Callable[[Sink], Any]


def kv_value(value: Any, esc: str) -> str:
    """A JSON value in the `k:v` syntax (strings between `esc` delimiters)."""
    if isinstance(value, str):
        return esc + value + esc
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{kv_value(v, esc)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(kv_value(v, esc) for v in value) + "]"
    return dumps(value)


def xml_value(value: Any, layout: bool = False) -> str:
    """A value as raw text inside a parameter tag: strings as they are, the rest as JSON.
    `layout`: the reader takes one newline after the open tag and one before the close as
    layout (`XmlSyntax.strip_newline`), so a string with a newline at either end gets both."""
    text = value if isinstance(value, str) else dumps(value)
    return f"\n{text}\n" if layout and (text.startswith("\n") or text.endswith("\n")) else text
