"""Conformance corpus for DeepSeek's DSML markup: V3.2 (`<｜DSML｜function_calls>`, format deepseek_v32)
and V4 (`<｜DSML｜tool_calls>`, format deepseek_v4), invokes with `string="true|false"` parameters, and
the thinking mode (`<think>` opened by the template: thinking_open).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "deepseek_v32"
V4 = "deepseek_v4"
VLLM_V32 = "vLLM tests/tool_parsers/test_deepseekv32_tool_parser.py"
VLLM_V4 = "vLLM tests/tool_parsers/test_deepseekv4_tool_parser.py"
TEMPLATE_V32 = "llama.cpp models/templates/DeepSeek-V3.2.jinja (tool-call and thinking layout)"
TEMPLATE_V4 = "llama.cpp models/templates/deepseek-ai-DeepSeek-V4.jinja (tool-call and thinking layout)"
OWN = "toolserve's own row"

D = "｜DSML｜"


def param(key: str, value: str, string: bool = True) -> str:
    return f'<{D}parameter name="{key}" string="{"true" if string else "false"}">{value}</{D}parameter>'


def invoke(name: str, *params: str) -> str:
    return f'<{D}invoke name="{name}">\n' + "".join(p + "\n" for p in params) + f"</{D}invoke>"


def block(*invokes: str, kind: str = "function_calls") -> str:
    return f"<{D}{kind}>\n" + "\n".join(invokes) + f"\n</{D}{kind}>"


PARIS = ("get_weather", {"city": "Paris"})
TOKYO_C = ("get_weather", {"city": "Tokyo", "unit": "c"})
TIME = ("get_time", {})
W_PARIS = invoke("get_weather", param("city", "Paris"))

ROWS = [
    Row("no_call", "just some text", content="just some text", source=VLLM_V32),
    Row("no_parameters", block(invoke("get_time")), calls=(TIME,), source=VLLM_V32),
    Row("string_parameters", block(invoke("get_weather", param("city", "Tokyo"), param("unit", "c"))),
        calls=(TOKYO_C,), source=VLLM_V32),
    Row("text_before", "Sure, let me check! " + block(W_PARIS), content="Sure, let me check!", calls=(PARIS,),
        source=VLLM_V32),
    Row("two_invokes_in_one_block", block(W_PARIS, invoke("get_weather", param("city", "Tokyo"), param("unit", "c"))),
        calls=(PARIS, TOKYO_C), source=VLLM_V32),
    # values typed by the tool's schema: string="false" scalars, and string="true" where the schema
    # asks for an integer (vLLM coerces both)
    Row("typed_by_schema", block(invoke("record", param("s", "x"), param("i", "42", False), param("b", "true", False),
                                        param("f", "3.14", False))),
        calls=(("record", {"s": "x", "i": 42, "b": True, "f": 3.14}),), source=VLLM_V32),
    Row("string_true_coerced_by_schema", block(invoke("record", param("s", "x"), param("i", "42"))),
        calls=(("record", {"s": "x", "i": 42}),), source=VLLM_V32),
    Row("object_and_array_parameters", block(invoke("record", param("s", "x"), param("a", '["a", "b"]', False),
                                                    param("o", '{"k": 1}', False))),
        calls=(("record", {"s": "x", "a": ["a", "b"], "o": {"k": 1}}),), source=VLLM_V32),
    Row("null_parameter", block(invoke("record", param("s", "x"), param("n", "null", False))),
        calls=(("record", {"s": "x", "n": None}),), source=VLLM_V32),
    # a parameter the schema does not type: string="false" says it is JSON, string="true" text
    Row("untyped_json_parameter", block(invoke("get_weather", param("city", "Paris"), param("days", "2", False))),
        calls=(("get_weather", {"city": "Paris", "days": 2}),), source=TEMPLATE_V32),
    Row("untyped_string_parameter", block(invoke("get_weather", param("city", "Paris"), param("days", "2"))),
        calls=(("get_weather", {"city": "Paris", "days": "2"}),), source=TEMPLATE_V32),
    # vLLM unwraps a lone `arguments` object that is not in the schema; toolserve returns what the
    # model wrote (the key is the model's, not ours to drop)
    Row("arguments_wrapper_kept", block(invoke("get_weather", param("arguments", '{"city": "Beijing"}', False))),
        calls=(("get_weather", {"arguments": {"city": "Beijing"}}),), source=VLLM_V32),
    Row("multiline_string_as_is", block(invoke("get_weather", param("city", "line1\nline2 <b> & \"q\""))),
        calls=(("get_weather", {"city": 'line1\nline2 <b> & "q"'}),), source=TEMPLATE_V32),
    # a parameter tag whose attributes do not parse names no key: the call keeps what came before and
    # the rest of its block is dropped, as for any call that breaks after it started
    Row("unparsable_parameter_tag", f"<{D}function_calls>\n" + invoke("get_weather", param("city", "Paris"),
                                                                     f"<{D}parameter name='unit'>c</{D}parameter>")
        + f"\n</{D}function_calls>", calls=(PARIS,), source=OWN),
    Row("text_after_block", block(W_PARIS) + "\nChecking now.", content="Checking now.", calls=(PARIS,), source=OWN),
    Row("eos_after_block", block(W_PARIS) + "<｜end▁of▁sentence｜>", calls=(PARIS,), source=TEMPLATE_V32),
    Row("unknown_tool_is_text", block(invoke("nope", param("x", "1"))), content=block(invoke("nope", param("x", "1"))),
        source=OWN),
    Row("opener_alone_is_text", "Use <｜DSML｜function_calls> blocks.", content="Use <｜DSML｜function_calls> blocks.",
        source=OWN),
    Row("partial_opener_at_end_is_text", "plain <｜DSML｜function_ca", content="plain <｜DSML｜function_ca", source=OWN),
    # cut by max_tokens inside a string value: the call stays with what was written
    Row("cut_inside_value", f"<{D}function_calls>\n" + f'<{D}invoke name="get_weather">\n' + f'<{D}parameter name="city" '
        'string="true">Par', calls=(("get_weather", {"city": "Par"}),), source=OWN),
    Row("cut_after_invoke", f"<{D}function_calls>\n{W_PARIS}\n", calls=(PARIS,), source=OWN),
    # thinking mode: the template ends the prompt with `<think>`
    Row("thinking_then_call", "The user wants the weather.</think>\n\n" + block(W_PARIS),
        reasoning="The user wants the weather.", calls=(PARIS,), thinking_open=True, source=TEMPLATE_V32),
    Row("thinking_then_answer", "Easy.</think>It is noon.", reasoning="Easy.", content="It is noon.",
        thinking_open=True, source=TEMPLATE_V32),
    Row("call_before_think_closes", "I should look it up.\n\n" + block(W_PARIS), reasoning="I should look it up.",
        calls=(PARIS,), thinking_open=True, source=OWN),
    Row("block_name_in_reasoning_is_reasoning", "I write <｜DSML｜function_calls> to call.</think>Done.",
        reasoning="I write <｜DSML｜function_calls> to call.", content="Done.", thinking_open=True, source=OWN),
    # V4: the same invokes in a tool_calls block
    Row("v4_text_before", "Let me check. " + block(invoke("get_weather", param("city", "Beijing"), param("unit", "c")),
                                                   kind="tool_calls"),
        content="Let me check.", calls=(("get_weather", {"city": "Beijing", "unit": "c"}),), source=VLLM_V4, fmt=V4),
    Row("v4_single", block(invoke("brave_search", param("query", "deepseek v4")), kind="tool_calls"),
        calls=(("brave_search", {"query": "deepseek v4"}),), source=VLLM_V4, fmt=V4),
    Row("v4_two_invokes", block(W_PARIS, invoke("get_time"), kind="tool_calls"), calls=(PARIS, TIME),
        source=TEMPLATE_V4, fmt=V4),
    Row("v4_typed", block(invoke("record", param("s", "x"), param("o", '{"k": [1, 2]}', False)), kind="tool_calls"),
        calls=(("record", {"s": "x", "o": {"k": [1, 2]}}),), source=TEMPLATE_V4, fmt=V4),
    Row("v4_thinking_then_call", "Need it.</think>\n\n" + block(W_PARIS, kind="tool_calls") + "<｜end▁of▁sentence｜>",
        reasoning="Need it.", calls=(PARIS,), thinking_open=True, source=TEMPLATE_V4, fmt=V4),
    # vLLM's V4 parser refuses the V3.2 block name; the markup is DSML either way (never prose) and
    # toolserve reads both, so a V4 model that writes V3.2's block still gets its call
    Row("v4_reads_v32_block", block(W_PARIS), calls=(PARIS,), source=VLLM_V4, fmt=V4),
    Row("v4_no_call", "plain answer", content="plain answer", source=VLLM_V4, fmt=V4),
]
