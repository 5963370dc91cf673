"""Calls as tool-trained models really write them, outside their family's markup.

Asked in `auto`, Qwen2.5-Coder answers a weather question with a fenced block, not with the
`<tool_call>` block its template asks for:

    ```json
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    ```

The rule (applied after the family's parser, to the answer's content, under tool_choice "auto",
where the chat template renders tools: serving/chat.py):
an answer whose content is, apart from whitespace and ```` ``` ```` / ```` ```json ```` fences,
nothing but JSON call objects, each alone or in a JSON list, is those calls when every object

- has only the keys `name`, `arguments` or `parameters` (exactly one of the two), `type`
  (`"function"`) and `id`,
- names an offered tool,
- has arguments that are an object (or a JSON string holding one, decoded; null is `{}`) and
  validate against that tool's JSON schema (no grammar held them, so we check what a grammar
  would have guaranteed: every call toolserve returns under auto is schema-valid).

Anything else stays text, whole: prose before or after the block, a name no tool has, a JSON
document the user asked for (`{"name": "my-app", "version": ...}` has keys a call has not), a
fenced example inside an explanation, a call whose arguments the schema rejects (it stays
text, as a malformed markup call does).

Streaming: while the content so far can still be such an answer, it is held back
(`LenientCalls`); as soon as it cannot (a letter where a `{` or a fence must stand, a language
tag other than json, a key no call has, a JSON value that breaks, text after it), it goes out as
it came. At the end, a held answer becomes its calls or its text. Non-streaming is `feed(all)` +
`finish()`, the same path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jsonschema

from ..types import ContentDelta, Delta, ToolCallArgs, ToolCallStart, ToolSpec
from .json_bodies import args_from_value
from .jsonstream import JsonReader, dumps, loads
from .scan import may_grow_into, skip_ws
from .stream import new_call_id

log = logging.getLogger(__name__)

FENCE = "```"
_LANGS = ("", "json")
_LANG_MAX = 16  # a fence's first line longer than this is no ```json
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id"})

# scanner states
_ITEM, _VALUE_OPEN, _FENCE_HEAD, _VALUE, _FENCE_TAIL, _DEAD = range(6)


class KeyWatch:
    """Follows the raw text of one JSON value for the keys of its call objects (the value itself,
    or each item of a top-level list): False as soon as one is a key no call has, so a JSON
    document goes out as text at its first such key, not at its end."""

    def __init__(self, first: str) -> None:
        self.call_depth = 1 if first == "{" else 2
        self.stack: list[str] = []
        self.in_str = self.esc = self.want_key = False
        self.key: list[str] | None = None  # the call object's key being read

    def feed(self, text: str) -> bool:
        for c in text:
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
                    if self.key is not None:
                        key, self.key = "".join(self.key), None
                        if key not in _CALL_KEYS:
                            return False
                        continue
                if self.key is not None:
                    self.key.append(c)
            elif c == '"':
                self.in_str = True
                if self.want_key and len(self.stack) == self.call_depth:
                    self.key = []
                self.want_key = False
            elif c in "{[":
                self.stack.append(c)
                self.want_key = c == "{"
            elif c in "}]":
                if self.stack:
                    self.stack.pop()
                self.want_key = False
            elif c == ",":
                self.want_key = bool(self.stack) and self.stack[-1] == "{"
            elif c not in " \t\r\n:":
                self.want_key = False
        return True


class CallScan:
    """Reads text that may be nothing but (fenced) JSON values, piece by piece; `alive` turns
    False, for good, once the text can no longer be that. `values` are the JSON texts read."""

    def __init__(self) -> None:
        self.buf = ""
        self.pos = 0
        self.state = _ITEM
        self.fenced = False
        self.reader: JsonReader | None = None
        self.keys: KeyWatch | None = None
        self.start = 0
        self.values: list[str] = []

    @property
    def alive(self) -> bool:
        return self.state != _DEAD

    def feed(self, text: str) -> bool:
        self.buf += text
        while self.state != _DEAD and self._step():
            pass
        return self.alive

    def complete(self) -> bool:
        """At the end of the text: it was one or more whole values (a last fence may stay open)."""
        return bool(self.values) and self.state in (_ITEM, _FENCE_TAIL) and not self.buf[self.pos:].strip()

    def _step(self) -> bool:
        """One move; False when more text is needed."""
        buf, n = self.buf, len(self.buf)
        if self.state == _VALUE:
            assert self.reader is not None and self.keys is not None
            pos, self.pos = self.pos, self.reader.feed(buf, self.pos)
            if self.reader.failed or not self.keys.feed(buf[pos:self.pos]):
                self.state = _DEAD
            elif self.reader.done:
                self.values.append(buf[self.start:self.pos])
                self.state = _FENCE_TAIL if self.fenced else _ITEM
                return True
            return False
        if self.state == _FENCE_HEAD:
            end = buf.find("\n", self.pos)
            lang = buf[self.pos:n if end < 0 else end].strip().lower()
            if end < 0:
                if len(buf) - self.pos > _LANG_MAX or not any(x.startswith(lang) for x in _LANGS):
                    self.state = _DEAD
                return False
            if lang not in _LANGS:
                self.state = _DEAD
                return False
            self.pos, self.state = end + 1, _VALUE_OPEN
            return True
        j = skip_ws(buf, self.pos)
        if j == n:
            return False
        if self.state == _FENCE_TAIL:
            if buf.startswith(FENCE, j):
                self.pos, self.state, self.fenced = j + len(FENCE), _ITEM, False
                return True
            if not may_grow_into(buf, j, FENCE):
                self.state = _DEAD
            return False
        if self.state == _ITEM:  # a fence may open here; after a fence's head, only a value
            if buf.startswith(FENCE, j):
                self.pos, self.state, self.fenced = j + len(FENCE), _FENCE_HEAD, True
                return True
            if may_grow_into(buf, j, FENCE):
                return False
        if buf[j] not in "{[":
            self.state = _DEAD
            return False
        self.reader, self.keys, self.start, self.pos, self.state = JsonReader(), KeyWatch(buf[j]), j, j, _VALUE
        return True


def schema_valid(args: dict[str, Any], schema: dict[str, Any]) -> bool:
    """The arguments validate against the tool's JSON schema (one the validator cannot use
    checks nothing: the request's schema is the client's, and no grammar could hold it either)."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        return bool(validator.is_valid(args))
    except Exception:  # a hostile schema (a bad $ref, deep recursion) must not end the request
        log.info("tool schema not usable for validation; the call's arguments are not checked")
        return True


def _call(obj: object, tools: Mapping[str, dict[str, Any]]) -> tuple[str, str] | None:
    """(name, canonical arguments) of one call object, or None when it is no call."""
    if not isinstance(obj, dict) or not obj.keys() <= _CALL_KEYS:
        return None
    name = obj.get("name")
    if not isinstance(name, str) or name not in tools or obj.get("type", "function") != "function":
        return None
    keys = [k for k in ("arguments", "parameters") if k in obj]
    if len(keys) != 1:
        return None
    args = args_from_value(obj[keys[0]])
    if args is None or not schema_valid(args, tools[name]):
        return None
    return name, dumps(args)


def read_calls(values: Iterable[str], tools: Mapping[str, dict[str, Any]]) -> list[tuple[str, str]] | None:
    """The calls the JSON `values` are, or None unless every object in them is one."""
    calls: list[tuple[str, str]] = []
    for text in values:
        try:
            value = loads(text)
        except ValueError:
            return None
        for obj in value if isinstance(value, list) else [value]:
            call = _call(obj, tools)
            if call is None:
                return None
            calls.append(call)
    return calls or None


def lenient_calls(text: str, tools: Iterable[ToolSpec]) -> list[tuple[str, str]] | None:
    """The calls a whole answer is under the rule above, or None: its text stays text."""
    scan = CallScan()
    scan.feed(text)
    return read_calls(scan.values, {t.name: t.parameters for t in tools}) if scan.complete() else None


class LenientCalls:
    """The rule above over a parser's deltas: content is held while it may be nothing but calls,
    and becomes them (or goes out as text) once that is known. Reasoning passes through; a call
    the family's own markup made ends the holding (the answer is not calls alone)."""

    def __init__(self, tools: Iterable[ToolSpec], id_factory: Callable[[], str] = new_call_id) -> None:
        self._tools = {t.name: t.parameters for t in tools}
        self._new_id = id_factory
        self._scan: CallScan | None = CallScan()  # None: decided, everything passes
        self._held: list[str] = []

    def feed(self, deltas: list[Delta]) -> list[Delta]:
        if self._scan is None:
            return deltas
        out: list[Delta] = []
        for d in deltas:
            if self._scan is None:
                out.append(d)
            elif isinstance(d, ContentDelta):
                self._held.append(d.text)
                if not self._scan.feed(d.text):
                    out += self._release()
            elif isinstance(d, ToolCallStart | ToolCallArgs):
                out += self._release()
                out.append(d)
            else:
                out.append(d)
        return out

    def finish(self, deltas: list[Delta]) -> list[Delta]:
        out = self.feed(deltas)
        if self._scan is None:
            return out
        calls = read_calls(self._scan.values, self._tools) if self._scan.complete() else None
        if calls is None:
            return out + self._release()
        log.info("answer read as %d JSON call(s) outside the family's markup: %s", len(calls), ", ".join(n for n, _ in calls))
        self._scan, self._held = None, []
        for i, (name, args) in enumerate(calls):
            out += [ToolCallStart(i, self._new_id(), name), ToolCallArgs(i, args)]
        return out

    def _release(self) -> list[Delta]:
        held, self._held, self._scan = self._held, [], None
        return [ContentDelta("".join(held))] if held else []
