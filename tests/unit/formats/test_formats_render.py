"""Prompt side: a prior call and its result written back in each family's own syntax
(compared with hand-written text), and every rendered call parses back to the same call."""

from __future__ import annotations

import json

import pytest

from toolserve.formats.registry import FORMATS
from toolserve.types import ToolCall, ToolSpec

CALL = ToolCall("call_abc123XYZ", "get_weather", '{"city": "Paris", "days": 2}')
TOOL = ToolSpec("get_weather", "Current weather.", {
    "type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                     "days": {"type": "integer"}}, "required": ["city"]})

# format id -> (rendered call, rendered result of "22 C", role of the result)
EXPECTED: dict[str, tuple[str, str, str]] = {
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>',
               "<tool_response>\n22 C\n</tool_response>", "user"),
    "llama3_json": ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', "22 C", "ipython"),
    "llama3_builtin": ('<|python_tag|>get_weather.call(city="Paris", days=2)', "22 C", "ipython"),
    "function_tag": ('<function=get_weather>{"city": "Paris", "days": 2}</function>', "22 C", "ipython"),
    "pythonic": ('[get_weather(city="Paris", days=2)]', "22 C", "ipython"),
    "llama4_pythonic": ('<|python_start|>[get_weather(city="Paris", days=2)]<|python_end|>', "22 C", "ipython"),
    "gemma3_tool_code": ('```tool_code\nget_weather(city="Paris", days=2)\n```', "```tool_output\n22 C\n```", "user"),
    "mistral": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}, "id": "abc123XYZ"}]',
                '[TOOL_RESULTS]{"content": "22 C", "call_id": "abc123XYZ"}[/TOOL_RESULTS]', "tool"),
    "mistral_v11": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}', "[TOOL_RESULTS]22 C[/TOOL_RESULTS]",
                    "tool"),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
                    "</parameter>\n</function>\n</tool_call>", "<tool_response>\n22 C\n</tool_response>", "user"),
    "deepseek_v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                    '{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
                    "<｜tool▁output▁begin｜>22 C<｜tool▁output▁end｜>", "tool"),
    "deepseek_v31": ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}'
                     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "<｜tool▁output▁begin｜>22 C<｜tool▁output▁end｜>", "tool"),
    "glm45": ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
              "<arg_value>2</arg_value>\n</tool_call>", "<tool_response>\n22 C\n</tool_response>", "tool"),
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>',
                "## Return of functions.get_weather:0\n22 C", "tool"),
    "minimax_m2": ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                   '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>', "<response>22 C</response>",
                   "tool"),
    "deepseek_v32": ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
                     '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                     '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                     "</｜DSML｜function_calls>", "<function_results>\n<result>22 C</result>\n</function_results>",
                     "tool"),
    "deepseek_v4": ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
                    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                    '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                    "</｜DSML｜tool_calls>", "<tool_result>22 C</tool_result>", "user"),
    "minimax_m3": (']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris'
                   ']<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n'
                   "]<]minimax[>[</tool_call>", "22 C", "tool"),
    "seed_oss": ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>2"
                 "</parameter>\n</function>\n</seed:tool_call>", "22 C", "tool"),
    "gpt_oss": ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                '{"city": "Paris", "days": 2}<|call|>',
                "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>22 C<|end|>", "tool"),
    "granite": ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "22 C", "tool"),
    "command_r": ('<|START_ACTION|>[{"tool_call_id": "call_abc123XYZ", "tool_name": "get_weather", "parameters": '
                  '{"city": "Paris", "days": 2}}]<|END_ACTION|>',
                  '<|START_TOOL_RESULT|>[{"tool_call_id": "call_abc123XYZ", "results": {"0": "22 C"}, "is_error": null}]'
                  "<|END_TOOL_RESULT|>", "tool"),
    "firefunction": (' functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "22 C", "tool"),
    "phi4_mini": ('functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "22 C", "tool"),
    "lfm2": ('<|tool_call_start|>[get_weather(city="Paris", days=2)]<|tool_call_end|>',
             "<|tool_response_start|>22 C<|tool_response_end|>", "tool"),
    "functiongemma": ("<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:2}<end_function_call>",
                      "<start_function_response>response:get_weather{value:<escape>22 C<escape>}<end_function_response>",
                      "tool"),
    "gemma4": ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
               '<|tool_response>response:get_weather{value:<|"|>22 C<|"|>}<tool_response|>', "tool"),
    "internlm2": ('<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'
                  "<|action_end|>", "22 C", "tool"),
    "jamba": ('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]</tool_calls>', "22 C",
              "tool"),
    "hunyuan": ('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]</tool_calls>',
                "<tool_response>22 C</tool_response>", "tool"),
    "xlam": ('[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', "22 C", "tool"),
    "apertus": ('<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 2}}]<|tools_suffix|>', "22 C", "tool"),
    "gigachat3": ('<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                  '"days": 2}}', "22 C", "tool"),
    "generic_json": ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]}',
                     '{"tool_response": {"tool_call_id": "call_abc123XYZ", "name": "get_weather", "content": "22 C"}}',
                     "user"),
}


def test_every_family_has_expected_rendering() -> None:
    assert set(EXPECTED) == set(FORMATS)


@pytest.mark.parametrize("fmt_id", sorted(EXPECTED))
def test_render_history(fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    call_text, result_text, role = EXPECTED[fmt_id]
    assert fmt.render_tool_call(CALL) == call_text
    assert fmt.render_tool_result("get_weather", CALL.id, "22 C") == result_text
    assert role == fmt.TOOL_RESULT_ROLE


@pytest.mark.parametrize("fmt_id", sorted(EXPECTED))
def test_rendered_call_parses_back(fmt_id: str) -> None:
    fmt = FORMATS[fmt_id]
    msg = fmt.parse(fmt.render_tool_call(CALL), [TOOL])
    assert msg.content == "" and msg.reasoning == ""
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [("get_weather", {"city": "Paris", "days": 2})]


@pytest.mark.parametrize("fmt_id", sorted(EXPECTED))
def test_render_tools_names_every_tool(fmt_id: str) -> None:
    other = ToolSpec("get_time", "The time now.", {"type": "object", "properties": {}})
    text = FORMATS[fmt_id].render_tools([TOOL, other])
    assert "get_weather" in text and "get_time" in text


def test_history_arguments_as_broken_json_render_as_empty_object() -> None:
    call = ToolCall("call_1", "get_time", "{not json")
    assert FORMATS["hermes"].render_tool_call(call) == '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


def test_gemma3_tools_are_python_signatures() -> None:
    text = FORMATS["gemma3_tool_code"].render_tools([TOOL])
    assert "def get_weather(city: str, days: int = None) -> dict:" in text
    assert '    """Current weather.\n\n    Args:\n        city: City name\n        days:\n    """' in text
    assert "```tool_code" in text and "```tool_output" in text


def test_hermes_tools_block() -> None:
    text = FORMATS["hermes"].render_tools([TOOL])
    assert "<tools>\n" + json.dumps({"type": "function", "function": {
        "name": "get_weather", "description": "Current weather.", "parameters": TOOL.parameters}}) + "\n</tools>" in text


def test_gpt_oss_tools_are_typescript() -> None:
    text = FORMATS["gpt_oss"].render_tools([TOOL])
    assert "namespace functions {" in text
    assert "type get_weather = (_: {\n// City name\ncity: string,\ndays?: number,\n}) => any;" in text


# format id -> the example call its tool prompt shows (it must appear verbatim and parse back)
PROMPT_EXAMPLES: dict[str, str] = {
    "hermes": '<tool_call>\n{"name": "function_name", "arguments": {"argument_name": "value"}}\n</tool_call>',
    "glm45": "<tool_call>function_name\n<arg_key>first_argument</arg_key>\n<arg_value>value</arg_value>\n"
             "<arg_key>second_argument</arg_key>\n<arg_value>value</arg_value>\n</tool_call>",
    "qwen3_coder": "<tool_call>\n<function=function_name>\n<parameter=argument_name>\nvalue\n</parameter>\n</function>\n"
                   "</tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="tool_name">\n<parameter name="argument_name">value</parameter>\n'
                  "</invoke>\n</minimax:tool_call>",
    "seed_oss": "<seed:tool_call>\n<function=function_name>\n<parameter=argument_name>value</parameter>\n</function>\n"
                "</seed:tool_call>",
    "generic_json": '{"tool_calls": [{"name": "tool_name", "arguments": {"argument_name": "value"}}]}',
    "llama3_json": '{"name": "function_name", "parameters": {"argument_name": "value"}}',
    "function_tag": '<function=function_name>{"argument_name": "value"}</function>',
    "pythonic": '[function_name(argument_name="text", other_argument=1), other_function()]',
    "llama4_pythonic": '[function_name(argument_name="text", other_argument=1), other_function()]',
    "gemma3_tool_code": '```tool_code\nfunction_name(argument_name="value")\n```',
    "granite": '<|tool_call|>[{"name": "function_name", "arguments": {"argument_name": "value"}}]',
    "command_r": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "tool_name", "parameters": '
                 '{"argument_name": "value"}}]<|END_ACTION|>',
    "firefunction": 'functools[{"name": "function_name", "arguments": {"argument_name": "value"}}]',
    "functiongemma": "<start_function_call>call:function_name{argument_name:<escape>value<escape>}<end_function_call>",
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>function_name\n```json\n"
                   '{"argument_name": "value"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek_v31": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function_name<｜tool▁sep｜>{"argument_name": "value"}'
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "internlm2": '<|action_start|><|plugin|>\n{"name": "plugin_name", "parameters": {"parameter_name": "value"}}'
                 "<|action_end|>",
    "jamba": '<tool_calls>[{"name": "function_name", "arguments": {"argument_name": "value"}}]</tool_calls>',
    "hunyuan": '<tool_calls>[{"name": "function_name", "arguments": {"argument_name": "value"}}]</tool_calls>',
    "xlam": '[{"name": "tool_name", "arguments": {"argument_name": "value"}}]',
    "apertus": '<|tools_prefix|>[{"function_name": {"argument_name": "value"}}]<|tools_suffix|>',
    "gigachat3": 'function call<|role_sep|>\n{"name": "function_name", "arguments": {"argument_name": "value"}}',
}


@pytest.mark.parametrize("fmt_id", sorted(PROMPT_EXAMPLES))
def test_prompt_example_call_is_valid_syntax(fmt_id: str) -> None:
    fmt, example = FORMATS[fmt_id], PROMPT_EXAMPLES[fmt_id]
    assert example in fmt.render_tools([TOOL])
    msg = fmt.parse(example)
    assert msg.content == "" and msg.tool_calls
    assert next(iter(json.loads(msg.tool_calls[0].arguments).values())) in ("value", "text")


def test_kimi_call_and_result_share_the_model_id() -> None:
    fmt = FORMATS["kimi_k2"]
    call = ToolCall("functions.get_weather:3", "get_weather", '{"city": "Paris"}')
    assert "<|tool_call_begin|>functions.get_weather:3<|tool_call_argument_begin|>" in fmt.render_tool_call(call)
    assert fmt.render_tool_result("get_weather", call.id, "22 C") == "## Return of functions.get_weather:3\n22 C"
