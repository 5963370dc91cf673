"""The conformance fixture table: every family, every case, in the family's own wire syntax.

Each family has a `Syntax` that writes calls the way the model does (written here by hand,
independently of the renderers under test). `CASES[family][case]` is either a `Case` or an
`NA` with the reason the family cannot express it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolserve.formats.registry import FORMATS
from toolserve.types import ToolSpec

TOOLS = [
    ToolSpec("get_weather", "Current weather for a city.", {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"},
                       "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}),
    ToolSpec("record", "Stores values of every JSON type.", {
        "type": "object",
        "properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "number"},
                       "b": {"type": "boolean"}, "n": {"type": ["integer", "null"]},
                       "o": {"type": "object"}, "a": {"type": "array"}},
        "required": ["s"]}),
    ToolSpec("get_time", "The time now.", {"type": "object", "properties": {}}),
    ToolSpec("brave_search", "Web search.", {"type": "object", "properties": {"query": {"type": "string"}},
                                             "required": ["query"]}),
    ToolSpec("code_interpreter", "Runs Python.", {"type": "object", "properties": {"code": {"type": "string"}}}),
]

Call = tuple[str, dict[str, Any]]

ONE = [("get_weather", {"city": "Paris"})]
PARALLEL = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo", "unit": "c"})]
ALL_TYPES = [("record", {"s": "x y", "i": 42, "f": -1.5, "b": True, "n": None,
                         "o": {"k": [1, "v"]}, "a": [1, 2.5, "z", False]})]
EMPTY: list[Call] = [("get_time", {})]
ESCAPES = [("get_weather", {"city": 'Sa "o" \\ Paulo é 東京 😀\nline2'})]
UNKNOWN = [("unknown_tool", {"city": "Paris"})]


@dataclass(frozen=True)
class Case:
    text: str
    content: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, dict[str, Any], str | None], ...] = ()
    thinking_open: bool = False


@dataclass(frozen=True)
class NA:
    reason: str


def J(value: Any) -> str:
    """Compact JSON with ASCII escapes: unlike the canonical form, so canonicalisation is tested."""
    return json.dumps(value, separators=(",", ":"))


def py(value: Any) -> str:
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {py(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def py_call(name: str, args: dict[str, Any]) -> str:
    return name + "(" + ", ".join(f"{k}={py(v)}" for k, v in args.items()) + ")"


def raw(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def kv(value: Any, esc: str) -> str:
    if isinstance(value, str):
        return esc + value + esc
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{kv(v, esc)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(kv(v, esc) for v in value) + "]"
    return json.dumps(value)


@dataclass
class Syntax:
    call: Callable[[str, dict[str, Any], int], str]
    block: Callable[[list[str]], str] = "".join  # type: ignore[assignment]
    think: tuple[str, str] | None = None
    malformed: str = ""
    content: Callable[[str], str] = lambda t: t
    ids: Callable[[str, int], str] | None = None  # ids the model writes (kept by the parser)
    na: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Case] = field(default_factory=dict)


THINK = ("<think>", "</think>")
G4_ESC = '<|"|>'
DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")


def _dsml_call(n: str, a: dict[str, Any]) -> str:
    params = "".join(f'<｜DSML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{raw(v)}'
                     "</｜DSML｜parameter>\n" for k, v in a.items())
    return f'<｜DSML｜invoke name="{n}">\n{params}</｜DSML｜invoke>\n'


M3 = "]<]minimax[>["


def _m3(value: Any) -> str:
    if isinstance(value, dict):
        return "".join(f"{M3}<{k}>{_m3(v)}{M3}</{k}>" for k, v in value.items())
    if isinstance(value, list):
        return "".join(f"{M3}<item>{_m3(v)}{M3}</item>" for v in value)
    return raw(value)


def _qwen_params(args: dict[str, Any]) -> str:
    return "".join(f"<parameter={k}>\n{raw(v)}\n</parameter>\n" for k, v in args.items())


SYNTAX: dict[str, Syntax] = {
    "hermes": Syntax(
        call=lambda n, a, i: f'<tool_call>\n{{"name": "{n}", "arguments": {J(a)}}}\n</tool_call>',
        block="\n".join, think=THINK,
        malformed='<tool_call>\n{"name": get_weather, "arguments": {}}\n</tool_call>',
        extra={
            "list_in_block": Case('<tool_call>[{"name": "get_weather", "arguments": {"city": "A"}}, '
                                  '{"name": "get_time", "parameters": {}}]</tool_call>',
                                  calls=(("get_weather", {"city": "A"}, None), ("get_time", {}, None))),
            "function_in_block": Case('<tool_call>\n<function=get_weather>{"city": "A"}</function>\n</tool_call>',
                                      calls=(("get_weather", {"city": "A"}, None),)),
            "missing_close": Case('Ok.\n<tool_call>\n{"name": "get_time", "arguments": {}}',
                                  content="Ok.", calls=(("get_time", {}, None),)),
            "args_before_name": Case('<tool_call>{"arguments": {"city": "A"}, "name": "get_weather"}</tool_call>',
                                     calls=(("get_weather", {"city": "A"}, None),)),
            "double_encoded": Case('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"A\\"}"}</tool_call>',
                                   calls=(("get_weather", {"city": "A"}, None),)),
            "literal_marker_in_prose": Case("Use the <tool_call> tag like <tool_call>this.",
                                            content="Use the <tool_call> tag like <tool_call>this."),
            "broken_after_start": Case('<tool_call>{"name": "get_weather", "arguments": {"city": "A", oops}}'
                                       '</tool_call>after',
                                       content="after", calls=(("get_weather", {"city": "A"}, None),)),
        }),
    "llama3_json": Syntax(
        call=lambda n, a, i: ("<|python_tag|>" if i == 0 else "") + f'{{"name": "{n}", "parameters": {J(a)}}}',
        block="; ".join, malformed='<|python_tag|>{"name": get_weather, "parameters": {}}',
        extra={
            "bare_json": Case('{"type": "function", "name": "get_weather", "parameters": {"city": "A"}}<|eom_id|>',
                              calls=(("get_weather", {"city": "A"}, None),)),
            "bare_json_not_a_call": Case('{"answer": 42}', content='{"answer": 42}'),
        }),
    "llama3_builtin": Syntax(
        call=lambda n, a, i: f"<|python_tag|>{py_call(n + '.call', a)}",
        malformed="<|python_tag|>brave_search.call(query=)",
        na={"parallel": "built-in tools are called one per turn (a single <|python_tag|> call)",
            "unknown_tool": "plain text after <|python_tag|> is code for code_interpreter, see 'code'"},
        extra={
            "code": Case("<|python_tag|>import math\nprint(math.pi)<|eom_id|>",
                         calls=(("code_interpreter", {"code": "import math\nprint(math.pi)"}, None),)),
            "search": Case('<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>',
                           calls=(("brave_search", {"query": "weather in Paris"}, None),)),
        }),
    "function_tag": Syntax(
        call=lambda n, a, i: f"<function={n}>{J(a)}</function>",
        malformed="<function=get_weather>city=Paris</function>"),
    "pythonic": Syntax(
        call=lambda n, a, i: py_call(n, a), block=lambda cs: "[" + ", ".join(cs) + "]",
        malformed='[get_weather city="Paris"]',
        na={"text_around": "a pythonic call list is only recognised as the whole answer"},
        extra={
            "positional_and_bare": Case('[get_weather("Paris", unit=c), get_time()]',
                                        calls=(("get_weather", {"city": "Paris", "unit": "c"}, None),
                                               ("get_time", {}, None))),
            "list_literal_is_content": Case("[1, 2, 3] are numbers", content="[1, 2, 3] are numbers"),
        }),
    "llama4_pythonic": Syntax(
        call=lambda n, a, i: py_call(n, a), block=lambda cs: "<|python_start|>[" + ", ".join(cs) + "]<|python_end|>",
        malformed='<|python_start|>[get_weather city="Paris"]<|python_end|>',
        extra={"bare_list": Case('[get_weather(city="A")]', calls=(("get_weather", {"city": "A"}, None),))}),
    "gemma3_tool_code": Syntax(
        call=lambda n, a, i: py_call(n, a), block=lambda cs: "```tool_code\n" + "\n".join(cs) + "\n```",
        malformed="```tool_code\n1 + get_weather\n```",
        extra={
            "positional": Case('```tool_code\nget_weather("Paris", "f")\n```',
                               calls=(("get_weather", {"city": "Paris", "unit": "f"}, None),)),
            "shell_style": Case("```tool_code\nget_weather 'New York'\n```",
                                calls=(("get_weather", {"city": "New York"}, None),)),
            "positional_typed": Case('```tool_code\nrecord("x", "7", "2.5")\n```',
                                     calls=(("record", {"s": "x", "i": 7, "f": 2.5}, None),)),
            "python_fence_is_content": Case("```python\nprint(1)\n```", content="```python\nprint(1)\n```"),
        }),
    "mistral": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}, "id": "a1B2c3D4{i}"}}',
        block=lambda cs: "[TOOL_CALLS][" + ", ".join(cs) + "]",
        malformed='[TOOL_CALLS][{"name": "get_weather", arguments: {}}]',
        ids=lambda n, i: f"a1B2c3D4{i}"),
    "mistral_v11": Syntax(
        call=lambda n, a, i: f"[TOOL_CALLS]{n}[ARGS]{J(a)}", think=("[THINK]", "[/THINK]"),
        malformed="[TOOL_CALLS]get_weather[ARGS]city=Paris",
        extra={"call_id": Case('[TOOL_CALLS]get_time[CALL_ID]abcDEF123[ARGS]{}',
                               calls=(("get_time", {}, "abcDEF123"),))}),
    "qwen3_coder": Syntax(
        call=lambda n, a, i: f"<tool_call>\n<function={n}>\n{_qwen_params(a)}</function>\n</tool_call>",
        block="\n".join, think=THINK,
        malformed="<tool_call>\n<function get_weather>\n</function>\n</tool_call>",
        extra={
            "multiline_string": Case("<tool_call>\n<function=get_weather>\n<parameter=city>\n\nline1\nline2\n\n"
                                     "</parameter>\n</function>\n</tool_call>",
                                     calls=(("get_weather", {"city": "\nline1\nline2\n"}, None),)),
            "untyped_number_stays_string": Case("<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n"
                                                "</parameter>\n</function>\n</tool_call>",
                                                calls=(("get_weather", {"city": "42"}, None),)),
            "bad_integer_kept_as_text": Case("<tool_call>\n<function=record>\n<parameter=i>\nmany\n</parameter>\n"
                                             "</function>\n</tool_call>",
                                             calls=(("record", {"i": "many"}, None),)),
        }),
    "deepseek_v3": Syntax(
        call=lambda n, a, i: f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{J(a)}\n```<｜tool▁call▁end｜>",
        block=lambda cs: DS_CALLS[0] + "\n".join(cs) + DS_CALLS[1], think=THINK,
        malformed=DS_CALLS[0] + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\ncity: Paris\n```"
                  "<｜tool▁call▁end｜>" + DS_CALLS[1]),
    "deepseek_v31": Syntax(
        call=lambda n, a, i: f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{J(a)}<｜tool▁call▁end｜>",
        block=lambda cs: DS_CALLS[0] + "".join(cs) + DS_CALLS[1], think=THINK,
        malformed=DS_CALLS[0] + "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>city: Paris<｜tool▁call▁end｜>"
                  + DS_CALLS[1]),
    "glm45": Syntax(
        call=lambda n, a, i: f"<tool_call>{n}\n" + "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{raw(v)}</arg_value>\n" for k, v in a.items()) + "</tool_call>",
        block="\n".join, think=THINK,
        malformed="<tool_call>get weather(city=Paris)</tool_call>",
        extra={"no_newline_after_name": Case("<tool_call>get_time</tool_call>", calls=(("get_time", {}, None),))}),
    "kimi_k2": Syntax(
        call=lambda n, a, i: f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{J(a)}<|tool_call_end|>",
        block=lambda cs: KIMI_SECTION[0] + "".join(cs) + KIMI_SECTION[1], think=THINK,
        malformed=KIMI_SECTION[0] + "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                  "city: Paris<|tool_call_end|>" + KIMI_SECTION[1],
        ids=lambda n, i: f"functions.{n}:{i}"),
    "minimax_m2": Syntax(
        call=lambda n, a, i: f'<invoke name="{n}">\n' + "".join(
            f'<parameter name="{k}">{raw(v)}</parameter>\n' for k, v in a.items()) + "</invoke>\n",
        block=lambda cs: "<minimax:tool_call>\n" + "".join(cs) + "</minimax:tool_call>", think=THINK,
        malformed="<minimax:tool_call>\n<invoke get_weather>\n</invoke>\n</minimax:tool_call>"),
    "deepseek_v32": Syntax(
        call=lambda n, a, i: _dsml_call(n, a),
        block=lambda cs: "<｜DSML｜function_calls>\n" + "".join(cs) + "</｜DSML｜function_calls>", think=THINK,
        malformed="<｜DSML｜function_calls>\n<｜DSML｜invoke get_weather>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        extra={"v4_block": Case('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_time">\n</｜DSML｜invoke>\n'
                                "</｜DSML｜tool_calls>", calls=(("get_time", {}, None),))}),
    "deepseek_v4": Syntax(
        call=lambda n, a, i: _dsml_call(n, a),
        block=lambda cs: "<｜DSML｜tool_calls>\n" + "".join(cs) + "</｜DSML｜tool_calls>", think=THINK,
        malformed="<｜DSML｜tool_calls>\n<｜DSML｜invoke get_weather>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"),
    "minimax_m3": Syntax(
        call=lambda n, a, i: f'{M3}<invoke name="{n}">{_m3(a)}{M3}</invoke>\n',
        block=lambda cs: f"{M3}<tool_call>\n" + "".join(cs) + f"{M3}</tool_call>", think=("<mm:think>", "</mm:think>"),
        malformed=f"{M3}<tool_call>\n{M3}<invoke get_weather>{M3}</invoke>\n{M3}</tool_call>",
        extra={"m2_block": Case('<minimax:tool_call>\n<invoke name="get_time">\n</invoke>\n</minimax:tool_call>',
                                calls=(("get_time", {}, None),))}),
    "seed_oss": Syntax(
        call=lambda n, a, i: f"<seed:tool_call>\n<function={n}>\n" + "".join(
            f"<parameter={k}>{raw(v)}</parameter>\n" for k, v in a.items()) + "</function>\n</seed:tool_call>",
        think=("<seed:think>", "</seed:think>"),
        malformed="<seed:tool_call>\n<function get_weather>\n</function>\n</seed:tool_call>"),
    "gpt_oss": Syntax(
        call=lambda n, a, i: f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json"
                             f"<|message|>{J(a)}<|call|>",
        think=("<|channel|>analysis<|message|>", "<|end|>"),
        content=lambda t: f"<|channel|>final<|message|>{t}<|return|>",
        malformed="<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                  "<|message|>city: Paris<|call|>",
        extra={"recipient_in_role": Case('<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant '
                                         'to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>',
                                         reasoning="Need it.", calls=(("get_time", {}, None),))}),
    "granite": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: "<|tool_call|>[" + ", ".join(cs) + "]", think=THINK,
        malformed='<|tool_call|>[{"name": get_weather}]',
        extra={"response_wrapper": Case("<think>Easy.</think><response>Noon.</response>", reasoning="Easy.",
                                        content="Noon."),
               "response_tag_in_prose": Case("Use <response> and </response> tags.",
                                             content="Use <response> and </response> tags.")}),
    "command_r": Syntax(
        call=lambda n, a, i: f'{{"tool_call_id": "{i}", "tool_name": "{n}", "parameters": {J(a)}}}',
        block=lambda cs: "<|START_ACTION|>[\n    " + ",\n    ".join(cs) + "\n]<|END_ACTION|>",
        think=("<|START_THINKING|>", "<|END_THINKING|>"),
        malformed='<|START_ACTION|>[{"tool_call_id": "0", "tool_name": get_weather}]<|END_ACTION|>',
        extra={"response_markers": Case("<|START_RESPONSE|>Hi there.<|END_RESPONSE|>", content="Hi there.")}),
    "firefunction": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: " functools[" + ", ".join(cs) + "]",
        malformed=' functools[{"name": get_weather}]',
        extra={"module_name_in_prose": Case("Import functools first.", content="Import functools first.")}),
    "phi4_mini": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: "functools[" + ", ".join(cs) + "]",
        malformed='functools[{"name": get_weather}]'),
    "lfm2": Syntax(
        call=lambda n, a, i: py_call(n, a), block=lambda cs: "<|tool_call_start|>[" + ", ".join(cs) + "]<|tool_call_end|>",
        malformed='<|tool_call_start|>[get_weather city="Paris"]<|tool_call_end|>',
        extra={"json_inside": Case('<|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "A"}}]'
                                   "<|tool_call_end|>", calls=(("get_weather", {"city": "A"}, None),))}),
    "functiongemma": Syntax(
        call=lambda n, a, i: f"<start_function_call>call:{n}{kv(a, '<escape>')}<end_function_call>",
        malformed="<start_function_call>call get_weather{}<end_function_call>"),
    "gemma4": Syntax(
        call=lambda n, a, i: f"<|tool_call>call:{n}{kv(a, G4_ESC)}<tool_call|>",
        think=("<|channel>thought", "<channel|>"),
        malformed="<|tool_call>call get_weather{}<tool_call|>",
        extra={"two_in_one_block": Case('<|tool_call>call:get_weather{city:<|"|>A<|"|>}call:get_time{}<tool_call|>',
                                        calls=(("get_weather", {"city": "A"}, None), ("get_time", {}, None)))}),
    "internlm2": Syntax(
        call=lambda n, a, i: f'<|action_start|><|plugin|>\n{{"name": "{n}", "parameters": {J(a)}}}<|action_end|>',
        block="\n".join, malformed='<|action_start|><|plugin|>\n{"name": get_weather}<|action_end|>'),
    "jamba": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: "<tool_calls>[" + ", ".join(cs) + "]</tool_calls>",
        malformed='<tool_calls>[{"name": get_weather}]</tool_calls>'),
    "hunyuan": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: "<tool_calls>[" + ", ".join(cs) + "]</tool_calls>", think=THINK,
        content=lambda t: f"<answer>\n{t}\n</answer>",
        malformed='<tool_calls>[{"name": get_weather}]</tool_calls>'),
    "xlam": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: "```json\n[" + ", ".join(cs) + "]\n```", think=THINK,
        malformed='```json\n[{"name": get_weather}]\n```',
        extra={"bare_list": Case('[{"name": "get_weather", "arguments": {"city": "A"}}]<|eot_id|>',
                                 calls=(("get_weather", {"city": "A"}, None),)),
               "list_literal_is_content": Case("[1, 2, 3] are numbers", content="[1, 2, 3] are numbers")}),
    "apertus": Syntax(
        call=lambda n, a, i: f'{{"{n}": {J(a)}}}',
        block=lambda cs: "<|tools_prefix|>[" + ", ".join(cs) + "]<|tools_suffix|>",
        think=("<|inner_prefix|>", "<|inner_suffix|>"),
        malformed="<|tools_prefix|>[{get_weather: {}}]<|tools_suffix|>"),
    "gigachat3": Syntax(
        call=lambda n, a, i: f'<|message_sep|>\n\nfunction call<|role_sep|>\n{{"name": "{n}", "arguments": {J(a)}}}',
        malformed='<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": get_weather}',
        na={"parallel": "one call per turn: the template renders only a message's first call"}),
    "generic_json": Syntax(
        call=lambda n, a, i: f'{{"name": "{n}", "arguments": {J(a)}}}',
        block=lambda cs: '{"tool_calls": [' + ", ".join(cs) + "]}",
        content=lambda t: json.dumps({"response": t}),
        malformed='{"tool_calls": [{"name": get_weather}]}',
        na={"text_around": "the whole answer is one JSON object: text and calls cannot be mixed"},
        extra={"single_tool_call": Case('{"tool_call": {"name": "get_time", "arguments": {}}}',
                                        calls=(("get_time", {}, None),)),
               "response_escapes": Case('{"response": "a \\"q\\" \\u00e9\\ud83d\\ude00\\nb"}',
                                        content='a "q" é😀\nb')}),
}


def _strip_drops(fmt_id: str, text: str) -> str:
    for m in FORMATS[fmt_id].GRAMMAR.drop:
        text = text.replace(m, "")
    return text.strip()


def _calls_text(sx: Syntax, calls: list[Call]) -> str:
    return sx.block([sx.call(n, a, i) for i, (n, a) in enumerate(calls)])


def _expected(sx: Syntax, calls: list[Call]) -> tuple[tuple[str, dict[str, Any], str | None], ...]:
    return tuple((n, a, sx.ids(n, i) if sx.ids else None) for i, (n, a) in enumerate(calls))


def build_cases(fmt_id: str) -> dict[str, Case | NA]:
    sx = SYNTAX[fmt_id]
    cases: dict[str, Case | NA] = {
        "no_tool_call": Case(sx.content("Hello there."), content="Hello there."),
        "one_call": Case(_calls_text(sx, ONE), calls=_expected(sx, ONE)),
        "parallel": Case(_calls_text(sx, PARALLEL), calls=_expected(sx, PARALLEL)),
        "all_json_types": Case(_calls_text(sx, ALL_TYPES), calls=_expected(sx, ALL_TYPES)),
        "empty_arguments": Case(_calls_text(sx, EMPTY), calls=_expected(sx, EMPTY)),
        "text_around": Case(sx.content("Let me check.") + "\n" + _calls_text(sx, ONE) + "\n" + sx.content("Done."),
                            content="Let me check.\nDone.", calls=_expected(sx, ONE)),
        "escapes_non_ascii": Case(_calls_text(sx, ESCAPES), calls=_expected(sx, ESCAPES)),
        "malformed": Case(sx.malformed, content=_strip_drops(fmt_id, sx.malformed)),
    }
    unknown = _calls_text(sx, UNKNOWN)
    cases["unknown_tool"] = Case(unknown, content=_strip_drops(fmt_id, unknown))
    if sx.think is None:
        why = f"{fmt_id} has no reasoning markers"
        for name in ("fake_marker_in_reasoning", "reasoning_then_call", "call_inside_open_reasoning",
                     "thinking_open"):
            cases[name] = NA(why)
    else:
        o, c = sx.think
        marker = next(t.marker for t in FORMATS[fmt_id].GRAMMAR.triggers if not t.lead)
        answer = sx.content("Answer.")
        cases["fake_marker_in_reasoning"] = Case(f"{o}I could use {marker} here.{c}{answer}",
                                                 reasoning=f"I could use {marker} here.", content="Answer.")
        cases["reasoning_then_call"] = Case(f"{o}\nNeed the weather.\n{c}\n\n" + _calls_text(sx, ONE),
                                            reasoning="Need the weather.", calls=_expected(sx, ONE))
        cases["call_inside_open_reasoning"] = Case(f"{o}Need the weather. " + _calls_text(sx, ONE),
                                                   reasoning="Need the weather.", calls=_expected(sx, ONE))
        cases["thinking_open"] = Case(f"Hmm, easy.\n{c}\n\n{answer}", reasoning="Hmm, easy.", content="Answer.",
                                      thinking_open=True)
    for name, reason in sx.na.items():
        cases[name] = NA(reason)
    cases.update(sx.extra)
    return cases


ALL_CASES: list[tuple[str, str, Case | NA]] = [
    (fmt_id, name, case) for fmt_id in FORMATS for name, case in build_cases(fmt_id).items()
]
