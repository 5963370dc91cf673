"""Conformance corpus for the functiongemma family (FunctionGemma 270M:
`<start_function_call>call:n{k:<escape>v<escape>,…}<end_function_call>`).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "functiongemma"
VLLM = "vLLM tests/tool_parsers/test_functiongemma_tool_parser.py"
OLLAMA = "Ollama model/parsers/functiongemma_test.go"
MLX = "mlx-lm tests/test_tool_parsing.py (function_gemma)"
OWN = "toolserve's own row"

E = "<escape>"
SC, EC = "<start_function_call>", "<end_function_call>"


def e(text: str) -> str:
    return E + text + E


def call(name: str, args: str) -> str:
    return f"{SC}call:{name}{{{args}}}{EC}"


ROWS = [
    Row("no_call", "Hello, how can I help you today?", content="Hello, how can I help you today?", source=VLLM),
    Row("one_call", call("get_weather", f"city:{e('London')}"), calls=(("get_weather", {"city": "London"}),), source=VLLM),
    Row("two_arguments", call("get_weather", f"city:{e('San Francisco')},unit:{e('c')}"),
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),), source=VLLM),
    Row("text_before_call", "Let me check the weather for you. " + call("get_weather", f"city:{e('Paris')}"),
        content="Let me check the weather for you.", calls=(("get_weather", {"city": "Paris"}),), source=VLLM),
    Row("text_joined_before_call", "Let me check." + call("get_weather", f"city:{e('Paris')}"), content="Let me check.",
        calls=(("get_weather", {"city": "Paris"}),), source=OLLAMA),
    Row("two_blocks", call("get_weather", f"city:{e('London')}") + call("get_time", f"timezone:{e('UTC')}"),
        calls=(("get_weather", {"city": "London"}), ("get_time", {"timezone": "UTC"})), source=VLLM),
    Row("same_tool_twice", call("get_weather", f"city:{e('Paris')}") + call("get_weather", f"city:{e('London')}"),
        calls=(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})), source=OLLAMA),
    Row("spaces_in_string", call("brave_search", f"query:{e('Hello World')}"), calls=(("brave_search", {"query": "Hello World"}),),
        source=VLLM),
    # vLLM types `<escape>42<escape>` as a number; toolserve does where the schema asks for one
    Row("escaped_integer_typed_by_schema", call("record", f"s:{e('x')},i:{e('42')}"), calls=(("record", {"s": "x", "i": 42}),),
        source=VLLM),
    Row("escaped_boolean_typed_by_schema", call("record", f"s:{e('x')},b:{e('true')}"), calls=(("record", {"s": "x", "b": True}),),
        source=VLLM),
    Row("escaped_number_stays_text_for_a_string", call("get_weather", f"city:{e('42')}"), calls=(("get_weather", {"city": "42"}),),
        source=OWN),
    # members written without commas between them (vLLM's streaming suite)
    Row("members_without_commas", call("get_weather", f"city:{e('NYC')}unit:{e('c')}"),
        calls=(("get_weather", {"city": "NYC", "unit": "c"}),), source=VLLM),
    Row("three_members_without_commas", call("record", f"s:{e('python')}i:{e('10')}o:{e('{}')}"),
        calls=(("record", {"s": "python", "i": 10, "o": {}}),), source=VLLM),
    Row("bare_numbers", call("record", "s:" + e("x") + ",i:1,f:2"), calls=(("record", {"s": "x", "i": 1, "f": 2}),),
        source=OLLAMA),
    Row("bare_booleans", call("record", "s:" + e("x") + ",b:true,n:null"), calls=(("record", {"s": "x", "b": True, "n": None}),),
        source=OLLAMA),
    Row("float", call("record", "s:" + e("x") + ",f:3.14"), calls=(("record", {"s": "x", "f": 3.14}),), source=OLLAMA),
    Row("big_integers", call("record", "s:" + e("x") + ",i:12234585,f:48838483920"),
        calls=(("record", {"s": "x", "i": 12234585, "f": 48838483920}),), source=MLX),
    Row("array_of_strings", call("record", "s:" + e("x") + ",a:[" + e("a") + "," + e("b") + "," + e("c") + "]"),
        calls=(("record", {"s": "x", "a": ["a", "b", "c"]}),), source=OLLAMA),
    Row("object_argument", call("record", "s:" + e("x") + ",o:{name:" + e("test") + ",value:42}"),
        calls=(("record", {"s": "x", "o": {"name": "test", "value": 42}}),), source=OLLAMA),
    Row("nested_object", call("record", "s:" + e("x") + ",o:{settings:{enabled:true,name:" + e("test") + "}}"),
        calls=(("record", {"s": "x", "o": {"settings": {"enabled": True, "name": "test"}}}),), source=OLLAMA),
    Row("empty_arguments", call("get_time", ""), calls=(("get_time", {}),), source=OLLAMA),
    Row("unicode", "こんにちは " + call("record", "s:" + e("日本語")), content="こんにちは",
        calls=(("record", {"s": "日本語"}),), source=OLLAMA),
    Row("text_after_call", call("get_time", "") + "Done!", content="Done!", calls=(("get_time", {}),), source=OLLAMA),
    Row("text_between_calls", call("get_time", "") + "Some text here" + call("get_weather", f"city:{e('Oslo')}"),
        content="Some text here", calls=(("get_time", {}), ("get_weather", {"city": "Oslo"})), source=OLLAMA),
    Row("angle_brackets_in_prose", "The result is a <value> tag", content="The result is a <value> tag", source=OLLAMA),
    Row("partial_marker_in_prose", "Hello <start world", content="Hello <start world", source=OLLAMA),
    Row("cut_inside_string", f"{SC}call:get_weather{{city:{E}Lon", calls=(("get_weather", {"city": "Lon"}),), source=OWN),
    Row("unknown_tool_is_text", call("nope", ""), content=call("nope", ""), source=OWN),
]
