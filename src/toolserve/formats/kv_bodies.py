"""The body reader of the `call:name{k:v,...}` syntax (functiongemma, gemma4): bare keys,
strings between the family's escape markers, other values as JSON. `KvCallsBody` reads a block
of such calls, `parse_kv_value` one value, `kv_value` writes one the way the reader takes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ..types import ToolSpec
from .base import DONE, FAIL, MORE, ArgsWriter, Sink, Written
from .grammar import Params, Writer, alt, kv_literals, lit, literal_value, members, seq
from .jsonstream import MAX_DEPTH, dumps, loads
from .scan import hold_from, may_grow_into_one, skip_ws
from .schema import coerce, is_plain_string, prop_schema

log = logging.getLogger(__name__)
_CALL_GAP = " \t\r\n,:"  # what may stand before `call:` (vLLM reads `<|tool_call>:call:...`)


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
                while i < n and buf[i] in _CALL_GAP:
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
                if not final and may_grow_into_one(buf, i, ("call:",)):
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
                    keep = len(buf) if final else min(hold_from(buf, i, m) for m in (esc, self.close or esc))
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
            parsed, end = parse_kv_value(value + close, skip_ws(value, 0), self.esc, schema)
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
        i = skip_ws(s, i + 1)
        while s[i] != close:
            if close == "}":
                if s.startswith(esc, i) or s[i] == '"':  # a quoted key
                    key_value, i = parse_kv_value(s, i, esc, {})
                    key = str(key_value)
                    i = skip_ws(s, i)
                    if s[i] != ":":
                        raise ValueError("expected ':'")
                    colon = i
                else:
                    colon = s.index(":", i)
                    key = s[i:colon].strip().strip("\"'")
                val, i = parse_kv_value(s, skip_ws(s, colon + 1), esc, prop_schema(schema, key), depth + 1)
                obj[key] = val
            else:
                val, i = parse_kv_value(s, i, esc, schema.get("items") or {}, depth + 1)
                obj.append(val)
            i = skip_ws(s, i)
            if s[i] == ",":
                i = skip_ws(s, i + 1)
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


def kv_value(value: Any, esc: str) -> str:
    """A JSON value in the `k:v` syntax (strings between `esc` delimiters)."""
    if isinstance(value, str):
        return esc + value + esc
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{kv_value(v, esc)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(kv_value(v, esc) for v in value) + "]"
    return dumps(value)
