"""Body readers for families whose calls are JSON.

- `JsonCallsBody`: `{"name": n, "arguments": {...}}` objects, a list of them, or several
  separated by a separator (hermes, llama3_json, mistral, granite, command_r, functools...).
- `GenericJsonBody`: the `{"tool_calls": [...]}` / `{"response": "..."}` envelope.

Arguments stream as soon as the name is known to be an offered tool and the arguments value
has opened with `{` (so `{"name": "f", "arguments": garbage` is still plain text). Arguments
written as a JSON string holding JSON are decoded (never passed on double-encoded):
`args_from_value`, which named_json_bodies.py shares.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ..types import ToolSpec
from .base import CONTENT, DONE, FAIL, MORE, Sink, Written
from .grammar import Writer, call_object_schema, generic_json_schema, json_value
from .jsonstream import JsonReader, dumps, loads
from .scan import skip_ws

log = logging.getLogger(__name__)


def args_from_value(value: object) -> dict | None:
    """Arguments given as an object, a JSON string holding one, or null; else None."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


class JsonCallsBody:
    """See the module docstring. `seps`: characters allowed between top-level objects."""

    next_state: str | None = None

    def __init__(self, sink: Sink, *, name_keys: tuple[str, ...] = ("name",),
                 args_keys: tuple[str, ...] = ("arguments", "parameters"), id_keys: tuple[str, ...] = (),
                 ignore_keys: tuple[str, ...] = ("type", "id"), lists: bool = True, seps: str = "",
                 single: bool = False, prior: bool = False) -> None:
        self.sink = sink
        self.name_keys, self.args_keys, self.id_keys = name_keys, args_keys, id_keys
        self.ignore_keys = ignore_keys
        self.lists, self.seps, self.single = lists, seps, single
        self.st = "top"
        self.in_list = False
        self.calls = 0
        self.prior = prior  # the enclosing block already emitted something
        self.reader: JsonReader | None = None
        self.what = ""  # which field the reader reads: key/name/id/args/skip
        self._new_object()

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, name_keys: tuple[str, ...] = ("name",),
                args_keys: tuple[str, ...] = ("arguments", "parameters"), id_keys: tuple[str, ...] = (),
                layout: str = "list", joiner: str = "; ", id_key: str | None = None, id_schema: dict[str, Any] | None = None,
                **_: Any) -> Written:
        """Call objects with the first of each kind of key (`id_key`: an id the family writes,
        by default its first id key). `layout`: how the family writes its calls: "object" (one
        per block), "list" (a JSON list) or "joined" (objects joined by `joiner`: Llama 3's `;`)."""
        schema = call_object_schema(tools, args_keys[0], name_keys[0], id_key or (id_keys[0] if id_keys else None), id_schema)
        if layout == "list":
            defs = schema.pop("$defs", None)  # `#/$defs/...` refs resolve from the document's root
            listed = {"type": "array", "items": schema, "minItems": 1, **({} if many else {"maxItems": 1})}
            return Written(json_value(w, {**listed, "$defs": defs} if defs else listed), True)
        one = json_value(w, schema)
        if layout == "joined" and many:
            return Written(f"{one} ({w.mark(joiner)} {one})*", True)
        return Written(one, layout == "joined")

    def _new_object(self) -> None:
        self.name: str | None = None
        self.call_id: str | None = None
        self.started = False
        self.discard = False
        self.args: list[str] = []  # canonical argument text held until the call starts
        self.args_streaming = False  # args value opened with `{`
        self.args_done = False
        self.key = ""

    def _failed_or_skip(self) -> int:
        """An object that is not a valid call: whole block fails unless calls came before."""
        if self.calls == 0 and not self.prior:
            return FAIL
        self.discard = True
        return MORE

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        i, n = pos, len(buf)
        while True:
            if self.reader is not None:
                i = self.reader.feed(buf, i)
                status = self._reader_progress(final and i >= n)
                if status != MORE:
                    return i, status
                if self.reader is not None:
                    if i >= n:
                        return i, self._at_end(final)
                    continue
            i = skip_ws(buf, i)
            if i >= n:
                return i, self._at_end(final)
            c = buf[i]
            st = self.st
            if st == "top" or st == "next":
                if c == "[" and self.lists and not self.in_list and st == "top":
                    self.in_list, self.st = True, "item"
                elif c == "{":
                    self.st = "key_or_end"
                elif st == "next" and c in self.seps:
                    self.st = "next_after_sep"
                elif st == "next":
                    return i, DONE
                else:
                    return i, FAIL if self.calls == 0 and not self.prior else DONE
                i += 1
            elif st == "next_after_sep":
                if c != "{":
                    return i, DONE
                self.st = "key_or_end"
                i += 1
            elif st in ("item", "item_after_comma"):
                if c == "{":
                    self.st = "key_or_end"
                elif c == "]" and st == "item":
                    self.in_list = False
                    return i + 1, DONE if self.calls or self.prior else FAIL
                else:
                    return i, DONE if self.calls or self.prior else FAIL
                i += 1
            elif st == "list_after":
                if c == ",":
                    self.st = "item_after_comma"
                elif c == "{":  # the comma between two call objects left out (Ollama reads it too)
                    self.st = "key_or_end"
                elif c == "]":
                    self.in_list = False
                    return i + 1, DONE
                else:
                    return i, DONE
                i += 1
            elif st in ("key_or_end", "key"):
                if c == "}" and st == "key_or_end":
                    status = self._end_object()
                    if status != MORE:
                        return i + 1, status
                elif c == '"':
                    self.reader, self.what = JsonReader(decode_top_string=True), "key"
                    continue
                else:
                    return i, self._broken()
                i += 1
            elif st == "colon":
                if c != ":":
                    return i, self._broken()
                self.st = "value"
                i += 1
            elif st == "value":
                self._begin_value(c)
                continue
            elif st == "after":
                if c == ",":
                    self.st = "key"
                elif c == "}":
                    status = self._end_object()
                    if status != MORE:
                        return i + 1, status
                else:
                    return i, self._broken()
                i += 1

    def _begin_value(self, c: str) -> None:
        key = self.key
        if key in self.args_keys and not self.discard:
            self.what = "args"
            self.args_streaming = c == "{"
            self.reader = JsonReader()
            self._maybe_start()
        elif key in self.name_keys or key in self.id_keys:
            self.what = "name" if key in self.name_keys else "id"
            self.reader = JsonReader(decode_top_string=True)
        else:
            self.what = "skip"
            self.reader = JsonReader()

    def _reader_progress(self, at_end: bool) -> int:
        r = self.reader
        assert r is not None
        if self.what == "args" and self.args_streaming:
            out = "".join(r.out)
            r.out.clear()
            if self.started:
                self.sink.call_args(out)
            else:
                self.args.append(out)
        if at_end and not r.done:
            r.finish()
        if r.failed:
            self.reader = None
            return self._broken()
        if not r.done:
            return MORE
        self.reader = None
        text = "".join(r.out)
        what = self.what
        if what == "key":
            self.key, self.st = text, "colon"
            if not (self.started or self.discard) and self.key not in (
                    self.name_keys + self.args_keys + self.id_keys + self.ignore_keys):
                return self._failed_or_skip()
            return MORE
        self.st = "after"
        if what == "name":
            if not self.sink.allowed(text) or self.name is not None:
                if self.name is None:
                    log.debug("%r is not an offered tool", text)
                return self._failed_or_skip()
            self.name = text
            self._maybe_start()
        elif what == "id":
            self.call_id = text
            self._maybe_start()
        elif what == "args":
            self.args_done = True
            if not self.args_streaming:
                args = args_from_value(json.loads(text))
                if args is None:
                    return self._failed_or_skip()
                self.args = [dumps(args)]
                self._maybe_start()
        return MORE

    def _maybe_start(self, closing: bool = False) -> None:
        if self.started or self.discard or self.name is None:
            return
        if self.id_keys and self.call_id is None and not closing:
            return
        if not (self.args_streaming or self.args_done or closing):
            return
        self.started = True
        self.sink.start_call(self.name, self.call_id)
        if self.args:
            self.sink.call_args("".join(self.args))
            self.args = []

    def _end_object(self) -> int:
        if not self.discard:
            if self.name is None:
                if self._failed_or_skip() == FAIL:
                    return FAIL
            else:
                self._maybe_start(closing=True)
                self.sink.end_call()
                self.calls += 1
        self._new_object()
        if self.in_list:
            self.st = "list_after"
            return MORE
        if self.single:
            return DONE
        self.st = "next"
        return MORE

    def _broken(self) -> int:
        """Malformed JSON: before any call it is text; after a start we keep what parsed."""
        if self.started:
            self.sink.abort_call()
            return FAIL
        return FAIL if self.calls == 0 and not self.prior else DONE

    def _at_end(self, final: bool) -> int:
        if not final:
            return MORE
        if self.st in ("next", "list_after") and self.reader is None:
            return DONE
        return self._broken()


class GenericJsonBody:
    """`{"tool_calls": [...]}`, `{"tool_call": {...}}` or `{"response": ...}` (whole output)."""

    next_state: str | None = None

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.st = "open"
        self.reader: JsonReader | None = None
        self.calls: JsonCallsBody | None = None
        self.emitted = False
        self.key = ""

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, **_: Any) -> Written:
        """`{"tool_calls": [...]}` (the whole answer: tool_choice auto is constraint.py's)."""
        return Written(json_value(w, generic_json_schema(tools, many, auto=False)), True)

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        i, n = pos, len(buf)
        while True:
            if self.calls is not None:
                i, status = self.calls.advance(buf, i, final)
                if status == MORE:
                    return i, MORE
                self.emitted = self.emitted or self.calls.calls > 0
                self.calls = None
                if status == FAIL:
                    return i, FAIL
                self.st = "after"
                continue
            if self.reader is not None:
                r = self.reader
                i = r.feed(buf, i)
                if final and i >= n:
                    r.finish()
                if self.key == "response":
                    text = "".join(r.out)
                    r.out.clear()
                    if text:
                        self.emitted = True
                        self.sink.emit_text(CONTENT, text)
                if r.failed:
                    return i, FAIL if not self.emitted else DONE
                if not r.done:
                    return i, MORE
                self.reader = None
                if self.st == "key":
                    self.key, self.st = "".join(r.out), "colon"
                    if self.key not in ("tool_calls", "tool_call", "response") and not self.emitted:
                        return i, FAIL
                else:
                    self.st = "after"
                continue
            i = skip_ws(buf, i)
            if i >= n:
                return i, MORE if not final else (DONE if self.emitted else FAIL)
            c, st = buf[i], self.st
            if st == "open" and c == "{":
                self.st = "key_start"
                i += 1
            elif st in ("key_start", "next") and c == '"':
                self.st = "key"
                self.reader = JsonReader(decode_top_string=True)
            elif st == "colon" and c == ":":
                self.st = "value"
                i += 1
            elif st == "value":
                if self.key == "tool_calls":
                    self.calls = JsonCallsBody(self.sink, lists=True, single=True, prior=self.emitted)
                elif self.key == "tool_call":
                    self.calls = JsonCallsBody(self.sink, lists=False, single=True, prior=self.emitted)
                else:
                    self.reader = JsonReader(decode_top_string=self.key == "response")
                    self.st = "skip"
            elif st == "after" and c == ",":
                self.st = "next"
                i += 1
            elif st == "after" and c == "}":
                return i + 1, DONE if self.emitted else FAIL
            else:
                return i, DONE if self.emitted else FAIL
