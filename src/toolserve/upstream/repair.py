"""Repairs what an OpenAI-compatible upstream (vLLM, SGLang, llama.cpp's server, another
toolserve) returns from /v1/chat/completions, so clients get the OpenAI contract.

Pure: plain dicts in (as parsed from the upstream's JSON), plain dicts out; nothing here does
I/O. `StreamRepair` takes the streamed chunks one by one, `repair_response` a whole
non-streaming body; both apply the same rules, so concatenating the repaired deltas of a stream
gives the message `repair_response` gives for the same output.

What upstreams do, and what is done about it (per choice, so n > 1 works):

- `index` missing on tool-call deltas: a known id names its call; a new id starts the next
  call; no id and no index continue the current call. A new id *with a name* on an index
  already used by another id also starts a new call (SGLang has sent index 0 for every call).
- `id` missing, or `""` on later deltas (vLLM): a missing id is replaced by `call_<hex>`; the id
  given first stays the call's id.
- the name repeated in every delta (vLLM named tool_choice, some parsers): only the first
  delta of a call carries `id`, `type` and the name. A name split over deltas is joined; the
  call's first delta is held until the name is complete, i.e. until its arguments start,
  another call starts or the choice ends. A fragment equal to the whole name so far is taken as
  a resend, not appended (so a name split as `ab` + `ab` would come out as `ab`).
- the whole arguments so far sent again (cumulative upstreams, or a final resend of the full
  arguments): a fragment that starts with everything received for the call so far only adds
  its new suffix. (A genuine fragment that happens to begin with the whole text so far, as in
  `{"a": ` + `{"a": 1}}`, is misread; no upstream split is known to produce that.)
- double-encoded arguments (a JSON string whose content is the JSON object): decoded. While
  a call's arguments start with `"` they are held, and decoded when the choice ends, so a
  split anywhere (inside an escape too) gives the same text. Other arguments pass through as
  they come. Arguments given as an object are serialized; missing or blank ones become `{}`.
- `finish_reason`: `length` and `content_filter` stay; `stop`, `tool_calls`, `function_call`
  and none at all become `tool_calls` when the choice returned a call and `stop` otherwise.
  Other values (`abort`, `error`, ...) are passed on as the upstream said.
- `role` goes out once, in the first delta of each choice. A chunk without choices (the usage
  chunk) passes through, after the choices that are still open are closed.
- reasoning under one name only: newer vLLM writes `reasoning` (0.32: that alone), older vLLM,
  SGLang, llama.cpp's server and DeepSeek's API `reasoning_content`. A message or delta that has one
  gets the other with the same text, as toolserve's own answers carry both.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Json = dict[str, Any]

_UNDECIDED, _PLAIN, _QUOTED = 0, 1, 2
_DECODE_DEPTH = 3  # how many layers of string encoding are undone at most
_CONSISTENT = (None, "stop", "tool_calls", "function_call")


REASONING_FIELDS = ("reasoning_content", "reasoning")


def with_both_reasoning(fields: Json) -> Json:
    """`fields` (a message or a delta) with its reasoning text under both names, when it has
    it under one (a string); unchanged otherwise."""
    given = [k for k in REASONING_FIELDS if isinstance(fields.get(k), str)]
    if len(given) != 1:
        return fields
    text = fields[given[0]]
    return {**fields, **{k: text for k in REASONING_FIELDS}}


def _obj(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def decode_arguments(value: Any) -> str:
    """The arguments of one call as the JSON text a client gets.

    An object is serialized; missing or blank arguments are `{}`; a JSON string holding a JSON
    object (double-encoded, maybe more than once) is unwrapped to that object's text as written.
    Anything else, broken JSON included, is returned unchanged.
    """
    if value is None:
        return "{}"
    if not isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if not value.strip():
        return "{}"
    if not value.lstrip().startswith('"'):
        return value
    text = value
    for _ in range(_DECODE_DEPTH):
        try:
            inner = json.loads(text)
        except ValueError:
            break
        if not isinstance(inner, str):
            break
        try:
            parsed = json.loads(inner)
        except ValueError:
            break
        if isinstance(parsed, dict):
            return inner
        if not isinstance(parsed, str):
            break
        text = inner
    return value


def finish_reason(upstream: Any, called: bool) -> Any:
    """The finish reason a client gets, given the upstream's and whether a call was returned."""
    if upstream in _CONSISTENT:
        return "tool_calls" if called else "stop"
    return upstream


# ---- non-streaming -----------------------------------------------------------------------


def repair_response(body: Json, id_factory: Callable[[], str] = new_call_id) -> Json:
    """A repaired copy of a non-streaming chat completion body (the input is not changed)."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return dict(body)
    return {**body, "choices": [_repair_choice(c, id_factory) if isinstance(c, dict) else c for c in choices]}


def _repair_choice(choice: Json, new_id: Callable[[], str]) -> Json:
    message = choice.get("message")
    if not isinstance(message, dict):
        return dict(choice)
    msg = with_both_reasoning(dict(message))
    calls: list[Json] = []
    given = message.get("tool_calls")
    if isinstance(given, list):
        seen: set[str] = set()
        for tc in given:
            if not isinstance(tc, dict):
                continue
            fn = _obj(tc.get("function"))
            name = _text(fn.get("name"))
            args = fn.get("arguments")
            if not name and (args is None or (isinstance(args, str) and not args.strip())):
                log.debug("dropping an empty tool call: %r", tc)
                continue
            call_id = tc.get("id")
            if not isinstance(call_id, str) or not call_id or call_id in seen:
                call_id = new_id()
            seen.add(call_id)
            calls.append({**tc, "id": call_id, "type": "function",
                          "function": {**fn, "name": name, "arguments": decode_arguments(args)}})
        msg["tool_calls"] = calls
    return {**choice, "message": msg, "finish_reason": finish_reason(choice.get("finish_reason"), bool(calls))}


# ---- streaming ---------------------------------------------------------------------------


@dataclass
class _Call:
    index: int  # the index clients see
    upstream_id: str | None = None
    id: str = ""  # fixed when the call's first delta goes out
    name: str = ""
    raw: str = ""  # the arguments received, resends removed
    pending: str = ""  # arguments not sent yet
    mode: int = _UNDECIDED  # _PLAIN: sent as they come; _QUOTED: held, decoded at the end
    started: bool = False
    closed: bool = False


@dataclass
class _Choice:
    calls: list[_Call] = field(default_factory=list)
    by_index: dict[int, _Call] = field(default_factory=dict)  # upstream index -> call
    by_id: dict[str, _Call] = field(default_factory=dict)  # upstream id -> call
    current: _Call | None = None
    role_sent: bool = False
    finished: bool = False

    @property
    def called(self) -> bool:
        return any(c.started for c in self.calls)


class _Out:
    """The tool-call entries of one outgoing delta, at most one per index."""

    def __init__(self) -> None:
        self._entries: dict[int, Json] = {}

    def start(self, call: _Call) -> None:
        self._entries[call.index] = {"index": call.index, "id": call.id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}

    def args(self, index: int, text: str) -> None:
        if not text:
            return
        entry = self._entries.get(index)
        if entry is None:
            entry = self._entries[index] = {"index": index, "function": {"arguments": ""}}
        entry["function"]["arguments"] += text

    def entries(self) -> list[Json]:
        return list(self._entries.values())

    def __bool__(self) -> bool:
        return bool(self._entries)


class StreamRepair:
    """Repairs one streamed chat completion: `feed` each upstream chunk, then `finish`."""

    def __init__(self, id_factory: Callable[[], str] = new_call_id) -> None:
        self._new_id = id_factory
        self._choices: dict[int, _Choice] = {}
        self._envelope: Json = {}  # id, object, created, model... of the last chunk

    def feed(self, chunk: Json) -> list[Json]:
        """The chunks to send for one upstream chunk (none while something is held back)."""
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return [chunk]  # not a completion chunk (an error object): passed on
        if not choices:  # the usage chunk comes last: close what is still open before it
            return [*self._close_open(), chunk]
        self._envelope = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        out = [c for c in (self._choice(c) for c in choices if isinstance(c, dict)) if c is not None]
        return [{**chunk, "choices": out}] if out else []

    def finish(self) -> list[Json]:
        """What is still held, and a finish reason for choices the upstream left open."""
        return self._close_open()

    # -- one choice ------------------------------------------------------------------------

    def _choice(self, choice: Json) -> Json | None:
        idx = choice.get("index")
        idx = idx if isinstance(idx, int) else 0
        st = self._choices.setdefault(idx, _Choice())
        delta = _obj(choice.get("delta"))
        body = with_both_reasoning({k: v for k, v in delta.items() if k not in ("tool_calls", "role")})
        out = _Out()
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list) and tool_calls:
            if st.finished:
                log.debug("tool call delta after the choice finished, dropped: %r", tool_calls)
            else:
                for tc in tool_calls:
                    if isinstance(tc, dict):
                        self._tool_delta(st, tc, out)
        reason = choice.get("finish_reason")
        if reason is not None:
            if not st.finished:
                self._close_calls(st, out)
                st.finished = True
            reason = finish_reason(reason, st.called)
        if out:
            body["tool_calls"] = out.entries()
        if not st.role_sent:
            body = {"role": delta.get("role") or "assistant", **body}
            st.role_sent = True
        elif not body and reason is None and choice.get("logprobs") is None and ("tool_calls" in delta or "role" in delta):
            return None  # everything in it was held back or a repeat
        return {**choice, "index": idx, "delta": body, "finish_reason": reason}

    def _close_open(self) -> list[Json]:
        closing = []
        for idx, st in sorted(self._choices.items()):
            if st.finished:
                continue
            out = _Out()
            self._close_calls(st, out)
            st.finished = True
            delta: Json = {}
            if not st.role_sent:
                delta["role"] = "assistant"
                st.role_sent = True
            if out:
                delta["tool_calls"] = out.entries()
            closing.append({"index": idx, "delta": delta, "logprobs": None,
                            "finish_reason": finish_reason(None, st.called)})
        return [{**self._envelope, "choices": closing}] if closing else []

    # -- tool calls ------------------------------------------------------------------------

    def _tool_delta(self, st: _Choice, tc: Json, out: _Out) -> None:
        fn = _obj(tc.get("function"))
        uid = _text(tc.get("id")) or None  # vLLM sends "" on later deltas
        raw_index = tc.get("index")
        uidx = raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        name = _text(fn.get("name"))
        call = self._resolve(st, uid, uidx, name, out)
        st.current = call
        if uid is not None:
            if call.upstream_id is None:
                call.upstream_id = uid
                if not call.started:
                    call.id = uid
            st.by_id.setdefault(uid, call)
        if name:
            self._name(call, name, out)
        if "arguments" in fn:
            self._args(call, fn["arguments"], out)

    def _resolve(self, st: _Choice, uid: str | None, uidx: int | None, name: str, out: _Out) -> _Call:
        if uid is not None and uid in st.by_id:
            return st.by_id[uid]
        if uidx is not None:
            call = st.by_index.get(uidx)
            if call is None:
                return self._new_call(st, uidx, out)
            if uid is not None and call.upstream_id is not None and name:
                return self._new_call(st, uidx, out)  # an index used again for another call
            return call  # a late id, or a new id on every delta of the same call
        cur = st.current
        if uid is None:
            return cur if cur is not None else self._new_call(st, None, out)
        if cur is not None and cur.upstream_id is None and (not name or name == cur.name):
            return cur  # the current call's id arrives late
        return self._new_call(st, None, out)

    def _new_call(self, st: _Choice, uidx: int | None, out: _Out) -> _Call:
        for earlier in st.calls:  # a call starting means the earlier names are complete
            if not earlier.started and earlier.name:
                self._start(earlier, out)
        call = _Call(index=len(st.calls))
        st.calls.append(call)
        if uidx is not None:
            st.by_index[uidx] = call
        return call

    def _name(self, call: _Call, name: str, out: _Out) -> None:
        if call.started:
            if name != call.name:
                log.debug("tool call %d: another name after the first delta ignored: %r", call.index, name)
            return
        if name != call.name:  # the same name again is a resend, anything else a piece of it
            call.name += name
        if call.raw:
            self._start(call, out)

    def _args(self, call: _Call, value: Any, out: _Out) -> None:
        if value is None:
            return
        fragment = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if call.raw and fragment.startswith(call.raw):
            new = fragment[len(call.raw):]
            call.raw = fragment
        else:
            new = fragment
            call.raw += fragment
        if not new:
            return
        call.pending += new
        if call.mode == _UNDECIDED:
            head = call.pending.lstrip()
            if head:
                call.mode = _QUOTED if head.startswith('"') else _PLAIN
        if not call.started and call.name:
            self._start(call, out)
        self._pump(call, out)

    def _start(self, call: _Call, out: _Out) -> None:
        call.started = True
        if not call.id:
            call.id = self._new_id()
        out.start(call)
        self._pump(call, out)

    def _pump(self, call: _Call, out: _Out) -> None:
        if call.started and call.mode == _PLAIN and call.pending:
            out.args(call.index, call.pending)
            call.pending = ""

    def _close_calls(self, st: _Choice, out: _Out) -> None:
        for call in st.calls:
            if call.closed:
                continue
            call.closed = True
            if not call.started:
                if not call.name and not call.raw.strip():
                    log.debug("dropping an empty tool call (no name, no arguments)")
                    continue
                self._start(call, out)
            if call.mode != _PLAIN:  # held: blank so far, or a JSON string to decode
                out.args(call.index, decode_arguments(call.pending))
                call.pending = ""
