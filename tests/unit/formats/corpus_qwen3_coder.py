"""Conformance corpus for Qwen3-Coder XML (Qwen3-Coder, Qwen3.5, Nemotron 3): output that starts
inside `<think>` opened by the template, a `<parameter=...>` left unclosed, values typed from the
schema.

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "qwen3_coder"
VLLM = "vLLM tests/tool_parsers/test_qwen3coder_tool_parser.py"
VLLM_ISSUE = "vLLM issue 57699 (missing </parameter> before </function>), in its qwen3coder tests"
VLLM_R = "toolserve's own row: the standard Qwen3 reasoning shape (vLLM tests/reasoning/test_qwen3_reasoning_parser.py was not read)"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (Qwen3-Coder template)"
SGLANG = "SGLang test_function_call_parser.py Qwen3CoderDetector"


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


DALLAS = ("get_weather", {"city": "Dallas", "unit": "f"})
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    Row("single", call("get_weather", ("city", "Paris")), calls=(PARIS,), source=LLAMA_CPP),
    Row("text_before", "Let me check the weather for you:\n" + call("get_weather", ("city", "Dallas"), ("unit", "f")),
        content="Let me check the weather for you:", calls=(DALLAS,), source=VLLM),
    Row("parallel", call("get_weather", ("city", "Paris")) + "\n" + call("get_time"), calls=(PARIS, TIME),
        source=LLAMA_CPP),
    Row("values_on_the_tag_line", "<tool_call>\n<function=get_weather>\n<parameter=city>Dallas</parameter>\n"
        "<parameter=unit>f</parameter>\n</function>\n</tool_call>", calls=(DALLAS,), source=LLAMA_CPP),
    Row("multiline_code_value", "<tool_call>\n<function=code_interpreter>\n<parameter=code>\ndef hello():\n"
        '    print("Hello, world!")\n\nhello()\n</parameter>\n</function>\n</tool_call>',
        calls=(("code_interpreter", {"code": 'def hello():\n    print("Hello, world!")\n\nhello()'}),), source=LLAMA_CPP),
    Row("typed_values", call("record", ("s", "x"), ("i", "42"), ("f", "-1.5"), ("b", "true"), ("n", "null"),
                             ("o", '{"k": [1, "v"]}'), ("a", '[1, "z"]')),
        calls=(("record", {"s": "x", "i": 42, "f": -1.5, "b": True, "n": None, "o": {"k": [1, "v"]}, "a": [1, "z"]}),),
        source=VLLM),
    Row("boolean_capitalised", call("record", ("s", "x"), ("b", "True")), calls=(("record", {"s": "x", "b": True}),),
        source=SGLANG),
    # -- a parameter left unclosed
    Row("unclosed_parameter_before_next", "Let me check the weather for you:\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nDallas\n<parameter=unit>\nf\n</parameter>\n</function>\n</tool_call>",
        content="Let me check the weather for you:", calls=(DALLAS,), source=VLLM),
    Row("unclosed_parameter_before_function_close", "<tool_call>\n<function=record>\n<parameter=o>\n"
        '{"k": [1, "v"], "on": true}\n</function>\n</tool_call>',
        calls=(("record", {"o": {"k": [1, "v"], "on": True}}),), source=VLLM_ISSUE),
    Row("unclosed_parameter_on_tag_line", "<tool_call>\n<function=get_weather>\n<parameter=city>Paris\n"
        "<parameter=unit>f</parameter>\n</function>\n</tool_call>",
        calls=(("get_weather", {"city": "Paris", "unit": "f"}),), source=VLLM),
    Row("unclosed_parameter_at_end_of_output", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis",
        calls=(PARIS,), source=LLAMA_CPP),
    Row("unclosed_function_and_block", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
        calls=(PARIS,), source=VLLM),
    # -- reasoning opened by the template
    Row("open_think_then_call", "The user wants the weather.\n</think>\n\n" + call("get_weather", ("city", "Paris")),
        reasoning="The user wants the weather.", calls=(PARIS,), source=VLLM_R, thinking_open=True),
    Row("open_think_then_content", "Let me think.</think>It is sunny.", reasoning="Let me think.",
        content="It is sunny.", source=VLLM_R, thinking_open=True),
    Row("open_think_only", "Still thinking about it", reasoning="Still thinking about it", source=VLLM_R,
        thinking_open=True),
    Row("open_think_empty", "</think>\n\nIt is sunny.", content="It is sunny.", source=VLLM_R, thinking_open=True),
    # a call before `</think>` ends the reasoning (formats.md)
    Row("open_think_call_without_close", "I need the weather.\n" + call("get_weather", ("city", "Paris")),
        reasoning="I need the weather.", calls=(PARIS,), source=VLLM_R, thinking_open=True),
    Row("think_tags_written", "<think>\nPlan.\n</think>\n\n" + call("get_time"), reasoning="Plan.", calls=(TIME,),
        source=VLLM_R),
    # -- not calls
    # vLLM also reads a bare `<function=...>` with no `<tool_call>` around it; `<function=` is plain
    # text to these models' tokenizers, so prose quoting the syntax would become a call: content
    Row("bare_function_not_a_call", "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
        content="<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>", source=VLLM),
    Row("no_call", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
]
