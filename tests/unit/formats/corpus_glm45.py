"""Conformance corpus for GLM-4.5 / 4.6 / 4.7 (`<tool_call>n<arg_key>k</arg_key><arg_value>v</arg_value>`):
4.7's calls with no newlines, zero-argument calls, and reasoning joined to content or to a call
with no separator.

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "glm45"
VLLM_47 = "vLLM tests/tool_parsers/test_glm47_moe_tool_parser.py"
VLLM_45 = "toolserve's own row: the standard GLM-4.5 shape (vLLM tests/tool_parsers/test_glm4_moe_tool_parser.py was not read)"
VLLM_R = "toolserve's own row: the standard GLM-4.5 reasoning shape (vLLM tests/reasoning/test_glm4_moe_reasoning_parser.py was not read)"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (GLM-4.6 / GLM-4.7-Flash templates)"

BEIJING = ("get_weather", {"city": "Beijing"})
SHANGHAI = ("get_weather", {"city": "Shanghai"})
TIME = ("get_time", {})
W47 = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>"

ROWS = [
    # -- call shapes
    Row("zero_args_inline", "<tool_call>get_time</tool_call>", calls=(TIME,), source=VLLM_47),
    Row("zero_args_newline", "<tool_call>get_time\n</tool_call>", calls=(TIME,), source=VLLM_47),
    Row("args_same_line", W47, calls=(BEIJING,), source=VLLM_47),
    Row("args_with_newlines", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>",
        calls=(BEIJING,), source=VLLM_45),
    Row("content_before", "Checking.<tool_call>get_time</tool_call>", content="Checking.", calls=(TIME,), source=VLLM_47),
    Row("whitespace_before", "  \n  <tool_call>get_time</tool_call>", calls=(TIME,), source=VLLM_47),
    Row("two_calls_adjacent", W47 + "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai</arg_value></tool_call>",
        calls=(BEIJING, SHANGHAI), source=VLLM_47),
    Row("two_calls_newline", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>\n"
        "<tool_call>get_time\n</tool_call>", calls=(BEIJING, TIME), source=VLLM_45),
    Row("typed_values", "<tool_call>record\n<arg_key>s</arg_key>\n<arg_value>x</arg_value>\n<arg_key>i</arg_key>\n"
        "<arg_value>42</arg_value>\n<arg_key>b</arg_key>\n<arg_value>true</arg_value>\n<arg_key>o</arg_key>\n"
        '<arg_value>{"k": [1, "v"]}</arg_value>\n</tool_call>',
        calls=(("record", {"s": "x", "i": 42, "b": True, "o": {"k": [1, "v"]}}),), source=VLLM_45),
    Row("llama_cpp_shape", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
        calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP),
    # -- reasoning joined with no separator
    Row("think_then_content_joined", "<think>The user greets me.</think>Hello!", reasoning="The user greets me.",
        content="Hello!", source=VLLM_R),
    Row("think_then_call_joined", "<think>Need the weather.</think>" + W47, reasoning="Need the weather.",
        calls=(BEIJING,), source=VLLM_R),
    Row("think_then_content_then_call_joined", "<think>Plan.</think>Checking." + W47, reasoning="Plan.",
        content="Checking.", calls=(BEIJING,), source=VLLM_R),
    Row("empty_think_then_content", "<think></think>Hello!", content="Hello!", source=VLLM_R),
    Row("open_think_then_content_joined", "The user greets me.</think>Hello!", reasoning="The user greets me.",
        content="Hello!", source=VLLM_R, thinking_open=True),
    Row("open_think_then_call_joined", "Need the weather.</think>" + W47, reasoning="Need the weather.",
        calls=(BEIJING,), source=VLLM_R, thinking_open=True),
    Row("open_think_not_closed", "Still thinking", reasoning="Still thinking", source=VLLM_R, thinking_open=True),
    Row("no_call", "This is a plain response.", content="This is a plain response.", source=VLLM_47),
]
