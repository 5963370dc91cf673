"""Incremental JSON reading: raw model text in, canonical JSON text out as a stable prefix.

`JsonReader` consumes one JSON value character by character (strings in chunks) and appends
the canonical form (`json.dumps(value, ensure_ascii=False)`) of what it has read so far to
`out`. Nothing it emitted can change later: numbers and literals are held until they end, and
a member's comma and key are only written with its value's first output, so a prefix never
ends in a key without its value. `close_json_prefix` turns such a prefix into a complete JSON
text when the model's output breaks off or turns malformed: it closes open strings, arrays and
objects and never adds a key or a value (a cut call is returned as the model wrote it).

Nesting is bounded by `MAX_DEPTH`: a value nested deeper is malformed, like any other broken
JSON, so model output never reaches a recursive reader (`json.loads` raises RecursionError at
about 1,000 levels) and every argument text we emit can be read back by one.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

# as deep as Python's own parser nests brackets (the pythonic families), far beyond any tool
# schema, and shallow enough for any recursive JSON reader downstream
MAX_DEPTH = 200

_STR_SPECIAL = re.compile(r'["\\]')
# a JSON string (maybe unterminated) or a bracket: what `too_deep` counts
_DEPTH_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)
_NUM_CHARS = frozenset("0123456789+-.eE")
_NUM_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?\Z")
_WS = " \t\r\n"
_LITERALS = ("true", "false", "null")
_SIMPLE_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

# reader states
_VALUE, _STRING, _ESC, _NUMBER, _LITERAL, _AFTER, _KEY_OR_END, _KEY, _COLON, _VALUE_OR_END = range(10)


def escape_str(text: str) -> str:
    """Body of the canonical JSON string for `text` (no surrounding quotes)."""
    return encode_basestring(text)[1:-1]  # type: ignore[no-any-return]


def canonical_number(text: str) -> str | None:
    """Canonical form of a JSON number literal, or None if it is not one."""
    if not _NUM_RE.match(text):
        return None
    if "." not in text and "e" not in text and "E" not in text:
        return str(int(text))
    value = float(text)
    return repr(value) if value not in (float("inf"), float("-inf")) else text


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON-like `text` opens more than `limit` brackets at once (strings skipped).

    Works on any text, well-formed or not, in one pass and without recursion."""
    depth = 0
    for m in _DEPTH_TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth -= 1
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a float")
    return value


def loads(text: str) -> Any:
    """`json.loads` for untrusted text, ValueError for all it should not read: nesting past
    MAX_DEPTH (json.loads would raise RecursionError, or return a value that is too deep for
    the next reader), and NaN, Infinity or 1e400, which would be written back as NaN/Infinity."""
    if too_deep(text):
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def dumps(value: object) -> str:
    """The canonical JSON text used for every tool call's arguments."""
    return json.dumps(value, ensure_ascii=False)


class JsonReader:
    """Reads one JSON value incrementally; see the module docstring.

    `decode_top_string=True` makes a top-level string come out decoded (plain text, no
    quotes), which lets a `{"response": "..."}` answer stream as content.
    """

    __slots__ = (
        "_decode",
        "_esc",
        "_first",
        "_hi",
        "_key",
        "_sep",
        "_st",
        "_stack",
        "_tok",
        "done",
        "failed",
        "out",
    )

    def __init__(self, decode_top_string: bool = False) -> None:
        self.out: list[str] = []
        self.done = False
        self.failed = False
        self._stack: list[str] = []  # "{" or "["
        self._st = _VALUE
        self._key = False  # the open string is an object key
        self._tok = ""  # number / literal / escape being read
        self._hi = 0  # pending high surrogate
        self._decode = decode_top_string
        self._first = True  # no member written yet in the innermost container
        self._sep = ""  # array comma, or object comma + key + colon, waiting for the value's first output

    def started(self) -> bool:
        return self._st != _VALUE or bool(self._stack) or self.done

    def feed(self, s: str, i: int) -> int:
        """Consume from s[i:]; returns the index where reading stopped (end, done or failure)."""
        n = len(s)
        while i < n and not self.done and not self.failed:
            st = self._st
            if st == _STRING:
                m = _STR_SPECIAL.search(s, i)
                j = n if m is None else m.start()
                if j > i:
                    self._text(s[i:j])
                    i = j
                    continue
                c = s[i]
                i += 1
                if c == '"':
                    self._end_string()
                else:
                    self._st, self._tok = _ESC, ""
                continue
            c = s[i]
            if st == _ESC:
                self._tok += c
                i += 1
                self._escape()
                continue
            if st == _NUMBER:
                if c in _NUM_CHARS:
                    self._tok += c
                    i += 1
                    continue
                num = canonical_number(self._tok)
                if num is None:
                    self.failed = True
                    break
                self._put(num)
                self._after_value()
                continue
            if st == _LITERAL:
                self._tok += c
                i += 1
                if self._tok in _LITERALS:
                    self._put(self._tok)
                    self._after_value()
                elif not any(lit.startswith(self._tok) for lit in _LITERALS):
                    self.failed = True
                continue
            if c in _WS:
                i += 1
                continue
            i += 1
            if st in (_VALUE, _VALUE_OR_END):
                if c == "]" and st == _VALUE_OR_END:
                    self._close("]")
                else:
                    self._begin_value(c)
            elif st == _AFTER:
                top = self._stack[-1]
                if c == ",":
                    self._st = _KEY if top == "{" else _VALUE
                elif (c == "}" and top == "{") or (c == "]" and top == "["):
                    self._close(c)
                else:
                    self.failed = True
            elif st in (_KEY_OR_END, _KEY):
                if c == '"':
                    self._sep = '"' if self._first else ', "'
                    self._first = False
                    self._st, self._key = _STRING, True
                elif c == "}" and st == _KEY_OR_END:
                    self._close("}")
                else:
                    self.failed = True
            elif st == _COLON:
                if c == ":":
                    self._sep += ": "
                    self._st = _VALUE
                else:
                    self.failed = True
        if self.failed:
            return i - 1 if i > 0 and st != _NUMBER else i
        return i

    def finish(self) -> None:
        """End of input: a top-level number ends here; anything else unfinished fails."""
        if self.done or self.failed:
            return
        if self._st == _NUMBER and not self._stack:
            num = canonical_number(self._tok)
            if num is not None:
                self._put(num)
                self.done = True
                return
        self.failed = True

    # -- helpers ---------------------------------------------------------------------------

    def _begin_value(self, c: str) -> None:
        # the separator (and an object member's key) is written with the value's first output,
        # so a value that turns out malformed or is cut off never leaves a dangling key behind
        if self._stack and self._stack[-1] == "[":
            self._sep = "" if self._first else ", "
            self._first = False
        if c == "{" or c == "[":
            if len(self._stack) >= MAX_DEPTH:
                self.failed = True
                return
            self._put(c)
            self._stack.append(c)
            self._first = True
            self._st = _KEY_OR_END if c == "{" else _VALUE_OR_END
        elif c == '"':
            if not (self._decode and not self._stack):
                self._put('"')
            self._st, self._key = _STRING, False
        elif c == "-" or c in "0123456789":
            self._st, self._tok = _NUMBER, c
        elif c in "tfn":
            self._st, self._tok = _LITERAL, c
        else:
            self.failed = True

    def _put(self, text: str) -> None:
        if self._sep:
            text, self._sep = self._sep + text, ""
        self.out.append(text)

    def _text(self, text: str) -> None:
        if self._hi:
            text = "\ufffd" + text  # a lone high surrogate: replaced, keeps output encodable
            self._hi = 0
        if self._key:
            self._sep += escape_str(text)
        else:
            self.out.append(text if self._decode and not self._stack else escape_str(text))

    def _escape(self) -> None:
        tok = self._tok
        if tok[0] != "u":
            ch = _SIMPLE_ESC.get(tok)
            if ch is None:
                self.failed = True
                return
            self._text(ch)
            self._st = _STRING
            return
        if len(tok) < 5:
            return
        try:
            code = int(tok[1:], 16)
        except ValueError:
            self.failed = True
            return
        self._st = _STRING
        if 0xD800 <= code < 0xDC00:
            if self._hi:
                self._text("")
            self._hi = code
        elif 0xDC00 <= code < 0xE000:
            if self._hi:
                hi, self._hi = self._hi, 0
                self._text(chr(0x10000 + ((hi - 0xD800) << 10) + (code - 0xDC00)))
            else:
                self._text("\ufffd")
        else:
            self._text(chr(code))

    def _end_string(self) -> None:
        if self._hi:
            self._text("")
        if self._key:
            self._sep += '"'
            self._st = _COLON
            return
        if not (self._decode and not self._stack):
            self.out.append('"')
        self._after_value()

    def _close(self, c: str) -> None:
        self._stack.pop()
        self.out.append(c)
        self._after_value()

    def _after_value(self) -> None:
        self._first = False
        if self._stack:
            self._st = _AFTER
        else:
            self.done = True


def close_json_prefix(prefix: str) -> str:
    """Text that completes `prefix` (a canonical JSON prefix as JsonReader emits) into JSON.

    Used when a call's arguments break off after some of them were streamed: it closes an open
    string, then the open arrays and objects, and adds nothing else. A prefix that ends in an
    object key or right after its colon cannot be completed without inventing a value: that is
    a ValueError (JsonReader never emits one; see `repair_json_prefix` for raw text).
    """
    stack: list[str] = []
    in_str = esc = False
    str_is_key = False
    last = ""  # last structural character outside strings ("k": a key ended, "v": a value)
    for ch in prefix:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                last = "k" if str_is_key else "v"
            continue
        if ch == '"':
            in_str = True
            str_is_key = bool(stack) and stack[-1] == "{" and last in ("{", ",")
        elif ch in "{[":
            stack.append(ch)
            last = ch
        elif ch in "}]":
            stack.pop()
            last = "v"
        elif ch in ",:":
            last = ch
        elif ch not in _WS:
            last = "v"
    if not prefix:
        return "{}"
    if (str_is_key if in_str else last in ("k", ":", ",")):
        raise ValueError("the prefix ends in a key or a separator without the value that follows")
    tail = '"' if in_str else ""
    return tail + "".join("}" if b == "{" else "]" for b in reversed(stack))


def repair_json_prefix(text: str) -> str | None:
    """`text` (any prefix of a JSON value, as a model wrote it) as the JSON it holds so far.

    Canonical form of what parsed, open strings, arrays and objects closed, and a member whose
    value had not started (or a number or literal not yet ended) dropped with its key: no key
    or value is added. None when `text` is not the start of a JSON object or array.
    """
    reader = JsonReader()
    end = reader.feed(text, 0)
    if reader.done:
        return "".join(reader.out) if not text[end:].strip() else None
    if reader.failed or not reader.out:
        return None
    out = "".join(reader.out)
    return out + close_json_prefix(out)
