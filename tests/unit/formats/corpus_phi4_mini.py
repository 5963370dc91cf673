"""Conformance corpus for the phi4_mini family (Phi-4-mini: `functools[{"name": n, "arguments": {...}}]`,
or `<|tool_call|>{...}<|/tool_call|>` as llama.cpp's Phi-4-mini template asks).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "phi4_mini"
VLLM = "vLLM tests/tool_parsers/test_phi4mini_tool_parser.py"
LLAMA_CPP = "llama.cpp models/templates/llama-cpp-microsoft-Phi-4-mini-instruct.jinja (its tool prompt)"
OWN = "toolserve's own row"

TOKYO = ("get_weather", {"city": "Tokyo"})
W = '{"name": "get_weather", "arguments": {"city": "Tokyo"}}'

ROWS = [
    Row("no_call", "This is a regular response without any tool calls.",
        content="This is a regular response without any tool calls.", source=VLLM),
    Row("single_call", f"functools[{W}]", calls=(TOKYO,), source=VLLM),
    Row("two_calls_on_lines", f'functools[\n  {W},\n  {{"name": "get_time", "arguments": {{}}}}\n]',
        calls=(TOKYO, ("get_time", {})), source=VLLM),
    Row("every_json_type_pretty_printed", 'functools[{\n  "name": "record",\n  "arguments": {\n    "s": "hello",\n'
        '    "i": 42,\n    "f": 3.14,\n    "b": true,\n    "n": null,\n    "a": ["a", "b", "c"],\n    "o": {"nested": '
        '"value", "empty_array": [], "empty_object": {}}\n  }\n}]',
        calls=(("record", {"s": "hello", "i": 42, "f": 3.14, "b": True, "n": None, "a": ["a", "b", "c"],
                           "o": {"nested": "value", "empty_array": [], "empty_object": {}}}),), source=VLLM),
    Row("empty_arguments", 'functools[{"name": "get_time", "arguments": {}}]', calls=(("get_time", {}),), source=VLLM),
    # vLLM strips the text around the calls; toolserve keeps it as content
    Row("text_around", f"Let me check the weather for you.\nfunctools[{W}]\nWould you like to know more?",
        content="Let me check the weather for you.\nWould you like to know more?", calls=(TOKYO,), source=VLLM),
    Row("escaped_strings", 'functools[{\n  "name": "record",\n  "arguments": {\n    "s": "He said \\"hello\\"",\n'
        '    "o": {"path": "C:\\\\Users\\\\file.txt", "newline": "line1\\nline2", "unicode": "emoji: 🎉"}\n  }\n}]',
        calls=(("record", {"s": 'He said "hello"', "o": {"path": "C:\\Users\\file.txt", "newline": "line1\nline2",
                                                          "unicode": "emoji: 🎉"}}),), source=VLLM),
    Row("end_token_after", f"functools[{W}]<|end|>", calls=(TOKYO,), source=OWN),
    Row("tool_call_tokens", f"<|tool_call|>{W}<|/tool_call|>", calls=(TOKYO,), source=LLAMA_CPP),
    Row("tool_call_tokens_list", f"<|tool_call|>[{W}]<|/tool_call|>", calls=(TOKYO,), source=LLAMA_CPP),
    Row("tool_call_tokens_twice", f'<|tool_call|>{W}<|/tool_call|><|tool_call|>{{"name": "get_time", "arguments": {{}}}}'
        "<|/tool_call|>", calls=(TOKYO, ("get_time", {})), source=LLAMA_CPP),
    # vLLM lists these as malformed; toolserve reads them: `functools` followed by a JSON call is
    # no prose, the call was announced
    Row("cut_inside_arguments", 'functools[{"name": "get_weather", "arguments": {', calls=(("get_weather", {}),),
        source=VLLM),
    Row("object_without_brackets", 'functools{"name": "get_time"}', calls=(("get_time", {}),), source=VLLM),
    Row("call_without_arguments", 'functools[{"name": "get_time"}]', calls=(("get_time", {}),), source=VLLM),
    # -- expected non-calls
    Row("arguments_not_an_object", 'functools[{"name": "get_weather", "arguments": "not a dict"}]',
        content='functools[{"name": "get_weather", "arguments": "not a dict"}]', source=VLLM),
    Row("empty_list", "functools[] This is just text", content="functools[] This is just text", source=VLLM),
    Row("list_of_text", "functools[ This is just text ]", content="functools[ This is just text ]", source=VLLM),
    Row("word_in_prose", "The functools module has partial.", content="The functools module has partial.", source=OWN),
]
