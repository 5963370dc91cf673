"""Body reader for Python call syntax: `[f(a=1, b="x"), g()]` or `f(a=1)` lines.

Arguments are parsed with `ast` (never eval), one argument at a time as soon as its closing
comma or parenthesis arrives, so arguments stream member by member. Positional arguments are
mapped onto the tool's parameters in schema order (required first); `shell=True` also
accepts `f some/path` (gemma3's small models). Bare names are read as strings, and
`true/false/null` as their JSON values.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import shlex
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import Unsupported
from ..types import ToolSpec
from .base import DONE, FAIL, MORE, ArgsWriter, Sink, Written
from .grammar import PYTHON, Params, Writer, alt, lit, literal_value, members, seq
from .schema import NotJson, coerce, is_plain_string, jsonable, ordered_params, prop_schema

log = logging.getLogger(__name__)
# names (and the spaces after them) are bounded, so a call still arriving is held back by a
# bounded amount: a longer one is no call
_MAX_NAME = 256
_IDENT = re.compile(rf"[A-Za-z_][\w.\-]{{0,{_MAX_NAME - 1}}}")
_LINE_END = re.compile("[\n`]")
_OUTSIDE = re.compile(r"[()\[\]{},'\"]")
_IN_SQ = re.compile(r"['\\\n\r\x00]")
_IN_DQ = re.compile(r'["\\\n\r\x00]')
# what may follow a quote that closes a one-line string (after spaces): anything else makes the
# quote part of the string (`'sed -n '1,5p' f'`, a model's unescaped inner quote)
_CLOSERS = ",)]}:'\""
_RAW_ESC = {"\n": "\\n", "\r": "\\r", "\0": "\\x00"}
_LEADING_ZEROS = re.compile(r"\s*(?:([A-Za-z_]\w*)\s*=\s*)?([+-]?)0+(\d+)\s*\Z")
_BARE = {"true": True, "false": False, "null": None, "none": None}
_WS = " \t\r\n"


def py_literal(node: ast.AST) -> Any:
    """A literal argument value; bare names are strings, true/false/null are JSON's."""
    if isinstance(node, ast.Name):
        return _BARE.get(node.id.lower(), node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return jsonable(node.value)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [py_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {str(py_literal(k)): py_literal(v) for k, v in zip(node.keys, node.values, strict=False) if k is not None}
    return jsonable(ast.literal_eval(node))


def parse_argument(text: str) -> tuple[str | None, Any]:
    """`k=v` -> (k, v); `v` -> (None, v). Raises ValueError/SyntaxError when not a literal."""
    with warnings.catch_warnings():  # "\i" in a model's string: invalid-escape warnings are noise
        warnings.simplefilter("ignore")
        tree = ast.parse("_(" + text + ")", mode="eval")
    call = tree.body
    if not isinstance(call, ast.Call) or len(call.args) + len(call.keywords) != 1:
        raise ValueError("not one argument")
    if call.keywords:
        kw = call.keywords[0]
        if kw.arg is None:
            raise ValueError("** argument")
        return kw.arg, py_literal(kw.value)
    if isinstance(call.args[0], ast.Starred):
        raise ValueError("* argument")
    return None, py_literal(call.args[0])


class PyCallsBody:
    next_state: str | None = None

    def __init__(self, sink: Sink, *, bracketed: bool = True, shell: bool = False,
                 name_map: Callable[[str], str] = lambda s: s) -> None:
        self.sink = sink
        self.bracketed, self.shell, self.name_map = bracketed, shell, name_map
        self.st = "open" if bracketed else "name"
        self.calls = 0
        self._reset("")

    @classmethod
    def grammar(cls, w: Writer, tools: Sequence[ToolSpec], many: bool, *, bracketed: bool = True,
                suffix: str = "", **_: Any) -> Written:
        """`name(k=v, ...)` for each tool, keyword arguments as Python literals of their schema
        (`python_value`); a list `[a(), b()]` when `bracketed`, else one call per line.
        `suffix`: what the family writes after a name (Llama 3's `.call`)."""
        options = []
        for i, t in enumerate(tools):
            params = Params.of(t, i)
            bad = next((k for k in params.order if not k.isidentifier()), None)
            if bad is not None:
                raise Unsupported(f"tool '{t.name}' has a parameter name that is not a Python identifier: {bad!r}", param="tools")

            def member(key: str, params: Params = params) -> str:
                return seq(lit(f"{key}="), literal_value(w, params, params.prop(key), PYTHON))

            options.append(w.rule("call", seq(lit(f"{t.name}{suffix}("), members(w, params, member, '", "'), lit(")"))))
        call = alt(options)
        if bracketed:
            return Written(f'"[" {call} ("," " "? {call})* "]"' if many else f'"[" {call} "]"', True)
        return Written(f'{call} ("\\n" {call})*' if many else call, True)

    def _reset(self, name: str) -> None:
        self.name = name
        self.writer: ArgsWriter | None = None
        self.discard = False
        self.arg: list[str] = []
        self.depth = 0
        self.quote = ""
        self.npos = 0
        self.seen: set[str] = set()

    def _stop(self) -> int:
        return FAIL if self.calls == 0 else DONE

    def advance(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n = len(buf)
        while True:
            if self.st == "args":
                pos, status = self._args(buf, pos, final)
                if status != DONE:
                    return pos, status
                continue
            if self.st == "shell":
                pos, status = self._shell(buf, pos, final)
                if status != DONE:
                    return pos, status
                continue
            i = pos
            while i < n and (buf[i] in _WS or (self.st == "next" and not self.bracketed and buf[i] == ";")):
                i += 1
            if i >= n:
                if not final:
                    return i, MORE  # what was skipped (spaces, `;`) starts no marker
                return i, DONE if self.st == "next" else self._stop()
            c = buf[i]
            if self.st == "open":
                if c != "[":
                    return pos, FAIL
                pos, self.st = i + 1, "name"
            elif self.st == "next":
                if self.bracketed and c == ",":
                    pos, self.st = i + 1, "name"
                elif self.bracketed and c == "]":
                    return i + 1, DONE if self.calls else FAIL
                elif not self.bracketed and _IDENT.match(c):
                    pos, self.st = i, "name"
                else:
                    return i, DONE
            else:  # name
                m = _IDENT.match(buf, i)
                if m is None:
                    return pos, self._stop()
                j = m.end()
                k = j
                while k < n and k - j < _MAX_NAME and buf[k] in " \t":
                    k += 1
                if k >= n and not final:
                    return i, MORE
                name = self.name_map(m.group())
                opener = buf[k] if k < n else ""
                if opener != "(" and not (self.shell and k > j and opener not in "\n`"):
                    return pos, self._stop()
                ok = self.sink.allowed(name)
                if not ok and self.calls == 0 and not self.bracketed:
                    return pos, FAIL
                self._reset(name)
                self.discard = not ok
                pos, self.st = (k + 1, "args") if opener == "(" else (k, "shell")

    def _args(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        n, i = len(buf), pos
        while i < n:
            q = self.quote
            if q:
                m = (_IN_SQ if q[0] == "'" else _IN_DQ).search(buf, i)
                if m is None:
                    self.arg.append(buf[i:])
                    i = n
                    break
                j = m.start()
                if buf[j] == "\\":
                    if j + 1 >= n and not final:
                        self.arg.append(buf[i:j])
                        return j, MORE
                    self.arg.append(buf[i:j + 2])
                    i = j + 2
                    continue
                if buf[j] in _RAW_ESC:  # a raw newline (one-line string) or NUL: escaped for `ast`
                    keep = len(q) == 3 and buf[j] != "\0"
                    self.arg.append(buf[i:j] + (buf[j] if keep else _RAW_ESC[buf[j]]))
                    i = j + 1
                    continue
                if len(q) == 3 and buf[j:j + 3] != q:
                    if n - j < 3 and not final:
                        self.arg.append(buf[i:j])
                        return j, MORE
                    self.arg.append(buf[i:j + 1])
                    i = j + 1
                    continue
                if len(q) == 1:  # closes the string only where a closer follows it
                    k = j + 1
                    while k < n and buf[k] in _WS:
                        k += 1
                    if k >= n and not final:
                        self.arg.append(buf[i:j])
                        return j, MORE
                    if k < n and buf[k] not in _CLOSERS:
                        self.arg.append(buf[i:j] + "\\" + q)
                        i = j + 1
                        continue
                self.arg.append(buf[i:j + len(q)])
                i, self.quote = j + len(q), ""
                continue
            m = _OUTSIDE.search(buf, i)
            if m is None:
                self.arg.append(buf[i:])
                i = n
                break
            j = m.start()
            c = buf[j]
            if c in "'\"":
                if n - j < 3 and not final:
                    self.arg.append(buf[i:j])
                    return j, MORE
                self.quote = c * 3 if buf[j:j + 3] == c * 3 else c
                self.arg.append(buf[i:j + len(self.quote)])
                i = j + len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}" and self.depth:
                self.depth -= 1
            elif c in ",)" and self.depth == 0:
                self.arg.append(buf[i:j])
                if not self._emit_arg():
                    self._abort()
                    return j, FAIL
                if c == ")":
                    self._close()
                    return j + 1, DONE
                i = j + 1
                continue
            self.arg.append(buf[i:j + 1])
            i = j + 1
        if final:
            self._abort()
            self.st = "next"
            return n, DONE if self.calls else FAIL
        return i, MORE

    def _shell(self, buf: str, pos: int, final: bool) -> tuple[int, int]:
        """`name some/path --flag`: the rest of the line, split like a shell would."""
        m = _LINE_END.search(buf, pos)
        if m is None and not final:
            self.arg.append(buf[pos:])  # the line so far, read once
            return len(buf), MORE
        end = m.start() if m is not None else len(buf)
        line = "".join(self.arg) + buf[pos:end]
        self.arg = []
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        for word in words:
            self._member(None, word)
        self._close()
        return end, DONE

    def _emit_arg(self) -> bool:
        text = "".join(self.arg).strip()
        self.arg = []
        if not text:
            return True
        try:
            key, value = parse_argument(text)
        except NotJson as exc:  # `x=1e999`: left out, the call goes on
            log.info("argument %r of %r left out: %s", text[:40], self.name, exc)
            return True
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            m = _LEADING_ZEROS.match(text)  # `month=07`: a zero-padded decimal, not Python 2 octal
            if m is None:
                return False
            key, value = m.group(1), int(m.group(2) + m.group(3))
        self._member(key, value)
        return True

    def _member(self, key: str | None, value: Any) -> None:
        params = self.sink.schema(self.name)
        if key is None:
            order = [p for p in ordered_params(params) if p not in self.seen]
            key = order[0] if order else f"arg{self.npos}"
            self.npos += 1
        self.seen.add(key)
        schema = prop_schema(params, key)
        if isinstance(value, str) and not is_plain_string(schema):
            value = coerce(value, schema)
        self._start()
        if self.writer is not None:
            self.writer.member(key, value)

    def _start(self) -> None:
        """The call starts once its first argument (or its closing parenthesis) parsed."""
        if self.writer is None and not self.discard:
            self.sink.start_call(self.name)
            self.writer = ArgsWriter(self.sink)

    def _close(self) -> None:
        self._start()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.calls += 1
        self.st = "next"

    def _abort(self) -> None:
        if self.writer is not None:
            self.sink.abort_call()
            self.writer = None
            self.calls += 1


def py_value(value: Any) -> str:
    """A JSON value written as a Python literal (for rendering calls back into history)."""
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(py_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {py_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def py_call(name: str, args: dict[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={py_value(v)}" for k, v in args.items()) + ")"
