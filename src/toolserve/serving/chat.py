"""Chat with tools and reasoning: render the conversation for the model's family, and turn its
output back into typed deltas (content, reasoning, tool calls), the same way streaming or not."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolserve.constrain.matcher import Arming, Constrainer
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.formats import constraint
from toolserve.formats.base import Format
from toolserve.formats.deltas import merge_deltas
from toolserve.formats.grammar import response_format_grammar
from toolserve.formats.lenient import LenientCalls
from toolserve.formats.template import ChatTemplate
from toolserve.types import (
    ContentDelta,
    Delta,
    Message,
    ReasoningDelta,
    TokenConstraint,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolSpec,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatOptions:
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"  # "auto" | "none" | "required" | "function" (a named one)
    tool_name: str | None = None  # the named function when tool_choice == "function"
    parallel_tool_calls: bool = True
    include_reasoning: bool = True
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def calls_allowed(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"


def _arguments_object(call: ToolCall) -> Any:
    """History arguments as an object for templates that iterate over them (never a string)."""
    try:
        value = json.loads(call.arguments) if call.arguments else {}
    except json.JSONDecodeError:
        return call.arguments
    return value


def tool_json(t: ToolSpec) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": t.name, "description": t.description, "parameters": t.parameters}
    return {"type": "function", "function": fn}


class ChatRenderer:
    """Turns messages + tools into the dicts and variables the chat template renders."""

    def __init__(self, template: ChatTemplate, fmt: Format):
        self.template = template
        self.fmt = fmt

    def render(self, messages: Sequence[Message], opts: ChatOptions) -> str:
        extra = dict(opts.template_kwargs)
        tools = opts.tools if opts.tool_choice != "none" else ()
        if self.template.supports_tools:
            dicts = [self._native(m) for m in messages]
            if tools:
                extra["tools"] = [tool_json(t) for t in tools]
        else:
            dicts = self._injected(messages, tools)
        return self.template.render(dicts, extra=extra)

    def shaper(self, prompt: str, opts: ChatOptions, *, calls_only: bool = False) -> OutputShaper:
        """The output side of a chat request rendered here: the family's parser, with the
        request's policy (for a local model and a raw upstream alike); `calls_only` where our
        grammar allows nothing but calls."""
        return OutputShaper(
            self.fmt, opts, thinking_open=self.thinking_open(prompt), parse=needs_parser(self.fmt, self.template, opts),
            calls_only=calls_only, lenient=self.template.supports_tools,
        )

    def thinking_open(self, prompt: str) -> bool:
        """The template itself opened the reasoning block at the end of the prompt."""
        return bool(self.fmt.REASONING) and prompt.rstrip().endswith(self.fmt.REASONING[0])  # type: ignore[index]

    def may_reason(self, prompt: str) -> bool:
        """The model may open a reasoning block itself: its template knows the family's markers
        and did not close an empty block at the end of the prompt (thinking turned off)."""
        if self.fmt.REASONING is None:
            return False
        open_, close = self.fmt.REASONING
        return open_ in self.template.source and not prompt.rstrip().endswith(close)

    @staticmethod
    def _native(m: Message) -> dict[str, Any]:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_object(c)}}
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        if m.name:
            d["name"] = m.name
        if m.reasoning:
            d["reasoning_content"] = m.reasoning
        return d

    def _injected(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """For templates that know no tools: the family's own prompt, calls and results as text."""
        fmt = self.fmt
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "tool":
                text = fmt.render_tool_result(names.get(m.tool_call_id or "", m.name or ""), m.tool_call_id or "", m.content or "")
                prev = out[-1] if out else None
                if prev is not None and prev.get("_tool_result"):
                    prev["content"] += "\n" + text  # results of parallel calls share one turn
                else:
                    out.append({"role": fmt.TOOL_RESULT_ROLE, "content": text, "_tool_result": True})
                continue
            content = m.content or ""
            if m.tool_calls:
                calls = "\n".join(fmt.render_tool_call(c) for c in m.tool_calls)
                content = f"{content}\n{calls}" if content else calls
            out.append({"role": m.role, "content": content})
        if tools:
            block = fmt.render_tools(tools)
            if out and out[0]["role"] in ("system", "developer"):
                out[0]["content"] = f"{out[0]['content']}\n\n{block}"
            else:
                out.insert(0, {"role": "system", "content": block})
        for d in out:
            d.pop("_tool_result", None)
        return out


class OutputShaper:
    """Feeds generated text to the family's parser and applies the request's policy:
    parallel_tool_calls, include_reasoning, and two rules of ours:
    - a call identical to one already made in the same answer (same name, same arguments)
      ends the answer: it is not returned (running it twice may do harm twice), and `stopped`
      tells the generation to stop; a call that starts like an earlier one is held back until
      it differs or ends;
    - `calls_only` (tool_choice required or a named function, under a grammar that allows
      nothing else): no content is returned, so a call marker cut short by max_tokens never
      becomes text;
    - under tool_choice auto, an answer that is nothing but JSON call objects naming offered
      tools (fenced or bare, as tool-trained models write them outside their markup) is those
      calls (formats/lenient.py); `lenient=False` where the chat template renders no tools (the
      model was not trained to call them, and our injected prompt asked for the markup).
    Non-streaming is feed(all) + finish()."""

    def __init__(self, fmt: Format, opts: ChatOptions, *, thinking_open: bool, parse: bool, calls_only: bool = False,
                 lenient: bool = True):
        self._parser = fmt.new_parser(opts.tools, thinking_open, calls=opts.calls_allowed) if parse else None
        lenient = lenient and parse and opts.calls_allowed and opts.tool_choice == "auto" and not calls_only
        self._lenient = LenientCalls(opts.tools) if lenient else None
        self._single = not opts.parallel_tool_calls
        self._reasoning = opts.include_reasoning
        self._calls_only = calls_only
        self.calls = 0
        self.stopped = False
        self._made: list[tuple[str, str]] = []  # (name, arguments) of the calls returned so far
        self._current: tuple[str, list[str]] | None = None  # the call being read: its name and arguments so far
        self._held: list[Delta] = []  # its deltas, while it may still be a repeat

    def feed(self, text: str) -> list[Delta]:
        if self._parser is None:
            return [ContentDelta(text)] if text else []
        deltas = self._parser.feed(text)
        return self._shape(self._lenient.feed(deltas) if self._lenient is not None else deltas)

    def finish(self) -> list[Delta]:
        if self._parser is None:
            return []
        deltas = self._parser.finish()
        out = self._shape(self._lenient.finish(deltas) if self._lenient is not None else deltas)
        return merge_deltas(out + self._end_call())

    def _shape(self, deltas: list[Delta]) -> list[Delta]:
        out: list[Delta] = []
        for d in deltas:
            if self.stopped:
                break
            if isinstance(d, ReasoningDelta) and not self._reasoning:
                continue
            if isinstance(d, ContentDelta) and self._calls_only:
                continue
            if isinstance(d, ToolCallStart | ToolCallArgs) and self._single and d.index > 0:
                continue  # parallel_tool_calls: false returns only the first call
            if isinstance(d, ToolCallStart):
                out += self._end_call()
                self._current = (d.name, [])
                if any(name == d.name for name, _ in self._made):
                    self._held = [d]  # it may be a repeat
                    continue
                self._count(d)
            elif isinstance(d, ToolCallArgs) and self._current is not None:
                self._current[1].append(d.fragment)
                if self._held:
                    self._held.append(d)
                    out += self._check_repeat()
                    continue
            out.append(d)
        return merge_deltas(out)  # a piece becomes as few chunks as it can

    def _check_repeat(self) -> list[Delta]:
        """A held call: let it go once it differs from every earlier call of its name."""
        assert self._current is not None
        name, parts = self._current
        args = "".join(parts)
        earlier = [a for n, a in self._made if n == name]
        if args in earlier:
            self.stopped = True  # the same call again: the answer ends before it
            self._held, self._current = [], None
            return []
        if any(a.startswith(args) for a in earlier):
            return []
        return self._release()

    def _release(self) -> list[Delta]:
        held, self._held = self._held, []
        if held and isinstance(held[0], ToolCallStart):
            self._count(held[0])
        return held

    def _end_call(self) -> list[Delta]:
        """The call being read is over (another starts, or the answer ends)."""
        out = self._release()  # held to the end without being a repeat: it differs
        if self._current is not None:
            self._made.append((self._current[0], "".join(self._current[1])))
            self._current = None
        return out

    def _count(self, d: ToolCallStart) -> None:
        self.calls += 1


def constraint_for(
    constrainer: Constrainer,
    fmt: Format,
    opts: ChatOptions,
    *,
    thinking_open: bool,
    response_schema: tuple[str, dict[str, Any] | None] | None,
    reasoning: bool = False,
) -> Callable[[], TokenConstraint] | None:
    """The token constraint a chat request asks for, compiled (or a 400), or None. Calls are
    constrained in the family's own syntax for every tool_choice but "none": "auto" lazily (free
    text until a call marker); a grammar that cannot be built under "auto" leaves the answer
    unconstrained (the parser still returns only well-formed calls), unless a tool is strict."""
    if response_schema is not None:
        if opts.calls_allowed:
            raise Unsupported("response_format cannot be combined with tools yet; drop one of them.", param="response_format")
        kind, schema = response_schema
        return constrainer.factory(response_format_grammar(kind, schema), param="response_format")
    if not opts.calls_allowed:
        return None
    if opts.tool_choice == "auto":
        try:
            c = constraint.lazy(fmt, opts.tools, opts.parallel_tool_calls, thinking_open=thinking_open, specials=constrainer.specials)
            return _factory(constrainer, c)
        except InvalidRequest as exc:
            if any(t.strict for t in opts.tools):
                raise
            log.info("tool calls left unconstrained under tool_choice auto: %s", exc.message)
            return None
    tools, parallel = forced_calls(opts)
    c = constraint.required(fmt, tools, parallel, thinking_open=thinking_open, reasoning=reasoning, specials=constrainer.specials)
    return _factory(constrainer, c)


def forced_calls(opts: ChatOptions) -> tuple[list[ToolSpec], bool]:
    """The tools a call may name under `required` or a named function, and whether several
    calls may come (never for a named function)."""
    if opts.tool_choice == "function":
        return [t for t in opts.tools if t.name == opts.tool_name], False
    return list(opts.tools), opts.parallel_tool_calls


def _factory(constrainer: Constrainer, c: constraint.CallConstraint) -> Callable[[], TokenConstraint]:
    arming = Arming(c.triggers, c.quiet, c.quiet_first) if c.triggers else None
    return constrainer.factory(c.grammar, param="tools", arming=arming)


def needs_parser(fmt: Format, template: ChatTemplate, opts: ChatOptions) -> bool:
    """Parse when calls may come, or when the model can reason (its template opens reasoning)."""
    reasoning = fmt.REASONING is not None and fmt.REASONING[0] in template.source
    return opts.calls_allowed or reasoning
