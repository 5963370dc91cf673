"""Conformance corpus for the Mistral family: `mistral` (pre-v11 tokenizer, a JSON list after
`[TOOL_CALLS]`, each call with the 9-character id the model writes) and `mistral_v11`
(`[TOOL_CALLS]name[ARGS]{...}`, repeated; reasoning in `[THINK]...[/THINK]`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A call given as (name, arguments, id) checks the id
the model wrote; (name, arguments) expects none written (toolserve makes a `call_…` id).
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "mistral"
V11 = "mistral_v11"
VLLM = "vLLM tests/tool_parsers/test_mistral_tool_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (Mistral Nemo)"
SGLANG = "SGLang test/registered/unit/function_call/test_mistral_detector.py"
OWN = "toolserve's own row"

PARIS = ("get_weather", {"city": "Paris"})
TOKYO = ("get_weather", {"city": "Tokyo", "unit": "c"})
TIME = ("get_time", {})

ROWS = [
    # -- mistral: a JSON list after [TOOL_CALLS]
    Row("with_id", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]',
        calls=(("get_weather", {"city": "Paris"}, "abc123def"),), source=LLAMA_CPP),
    Row("without_id", '[TOOL_CALLS][{"name": "get_weather", "arguments":{"city": "Paris"}}]', calls=(PARIS,), source=VLLM),
    Row("space_after_marker", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        calls=(PARIS,), source=VLLM),
    Row("spaces_inside_json", '[TOOL_CALLS]  [ {"name":"get_weather" , "arguments" : {"city": "Paris"} } ]',
        calls=(PARIS,), source=VLLM),
    Row("arguments_before_name", '[TOOL_CALLS] [{"arguments": {"city": "Paris"}, "name": "get_weather"}]',
        calls=(PARIS,), source=VLLM),
    Row("name_key_inside_arguments", '[TOOL_CALLS] [{"arguments": {"s": "x", "o": {"name": "John Doe"}}, "name": "record"}]',
        calls=(("record", {"s": "x", "o": {"name": "John Doe"}}),), source=VLLM),
    Row("string_and_number_arguments", '[TOOL_CALLS] [{"name": "record", "arguments": {"s": "3", "f": 3.5, "i": 4}}]',
        calls=(("record", {"s": "3", "f": 3.5, "i": 4}),), source=VLLM),
    Row("two_calls_one_list", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_weather", "arguments":{"city": "Tokyo", "unit": "c"}}]', calls=(PARIS, TOKYO), source=VLLM),
    Row("two_calls_arguments_first", '[TOOL_CALLS] [{"arguments": {"city": "Paris"}, "name": "get_weather"}, '
        '{"arguments":{"city": "Tokyo", "unit": "c"}, "name": "get_weather"}]', calls=(PARIS, TOKYO), source=VLLM),
    Row("two_calls_with_ids", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}, '
        '{"name": "get_time", "arguments": {}, "id": "XYZ789ghi"}]',
        calls=(("get_weather", {"city": "Paris"}, "abc123def"), ("get_time", {}, "XYZ789ghi")), source=OWN),
    Row("id_before_arguments", '[TOOL_CALLS][{"name": "get_time", "id": "abc123def", "arguments": {}}]',
        calls=(("get_time", {}, "abc123def"),), source=OWN),
    Row("no_call", "This is a test", content="This is a test", source=VLLM),
    Row("two_tools_one_list", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "brave_search", "arguments": {"query": "restaurants"}}]',
        calls=(PARIS, ("brave_search", {"query": "restaurants"})), source=SGLANG),
    Row("content_before_spaced", 'I will check. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        content="I will check.", calls=(PARIS,), source=SGLANG),
    Row("nested_object_and_list_arguments", '[TOOL_CALLS] [{"name": "record", "arguments": {"s": "x", '
        '"o": {"detailed": true}, "a": ["a", "b"]}}]',
        calls=(("record", {"s": "x", "o": {"detailed": True}, "a": ["a", "b"]}),), source=SGLANG),
    # SGLang drops a list that is no JSON; toolserve never drops the model's text
    Row("list_not_json", "[TOOL_CALLS] [not valid json]", content="[TOOL_CALLS] [not valid json]", source=SGLANG),
    Row("content_before", 'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        content="Let me check.", calls=(PARIS,), source=OWN),
    # issue 16's Mistral miss: text the model writes after its calls is content, never dropped
    Row("text_after_calls", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}] '
        "I asked for the weather.", content="I asked for the weather.",
        calls=(("get_weather", {"city": "Paris"}, "abc123def"),), source=OWN),
    Row("text_after_calls_newline", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]\nChecking now.',
        content="Checking now.", calls=(PARIS,), source=OWN),
    Row("end_of_sequence_after", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]</s>',
        calls=(("get_weather", {"city": "Paris"}, "abc123def"),), source=OWN),
    # -- mistral_v11: [TOOL_CALLS]name[ARGS]{...}, repeated
    Row("v11_one_call", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', calls=(PARIS,), source=VLLM, fmt=V11),
    Row("v11_two_calls", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Tokyo", "unit": "c"}',
        calls=(PARIS, TOKYO), source=VLLM, fmt=V11),
    # `[ARGS]` left out (vLLM's own spelling of these calls)
    Row("v11_without_args_marker", '[TOOL_CALLS]get_weather{"city": "Paris", "unit": "c"}',
        calls=(("get_weather", {"city": "Paris", "unit": "c"}),), source=VLLM, fmt=V11),
    Row("v11_two_calls_without_args_marker", '[TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]get_time{}',
        calls=(PARIS, TIME), source=VLLM, fmt=V11),
    Row("v11_content_before_without_args_marker", 'bla[TOOL_CALLS]get_weather{"city": "Paris"}', content="bla",
        calls=(PARIS,), source=VLLM, fmt=V11),
    Row("v11_braces_in_content_without_args_marker",
        'hi{hi[TOOL_CALLS]code_interpreter{"code": "print(\\"hello world!\\")\\nre.compile(r\'{}\')"}',
        content="hi{hi", calls=(("code_interpreter", {"code": "print(\"hello world!\")\nre.compile(r'{}')"}),),
        source=VLLM, fmt=V11),
    # a name that is no tool: the text it was, as with `[ARGS]`
    Row("v11_unknown_tool_without_args_marker", '[TOOL_CALLS]nope{"a": 1}', content='[TOOL_CALLS]nope{"a": 1}',
        source=OWN, fmt=V11),
    Row("v11_empty_arguments", "[TOOL_CALLS]get_time[ARGS]{}", calls=(TIME,), source=OWN, fmt=V11),
    Row("v11_content_before", 'bla[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', content="bla", calls=(PARIS,),
        source=VLLM, fmt=V11),
    Row("v11_braces_in_content_and_escapes",
        'hi{hi[TOOL_CALLS]code_interpreter[ARGS]{"code": "print(\\"hello world!\\")\\nre.compile(r\'{}\')"}',
        content="hi{hi", calls=(("code_interpreter", {"code": "print(\"hello world!\")\nre.compile(r'{}')"}),),
        source=VLLM, fmt=V11),
    Row("v11_call_id", '[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{"city": "Paris"}',
        calls=(("get_weather", {"city": "Paris"}, "abc123def"),), source=OWN, fmt=V11),
    Row("v11_content_before_spaced", 'Let me help. [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', content="Let me help.",
        calls=(PARIS,), source=SGLANG, fmt=V11),
    Row("v11_no_call_sglang", "The weather is nice today.", content="The weather is nice today.", source=SGLANG, fmt=V11),
    Row("v11_no_call", "This is a test", content="This is a test", source=VLLM, fmt=V11),
    # issue 16's Mistral miss, v11 spelling
    Row("v11_text_after_calls", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"} I asked for the weather.',
        content="I asked for the weather.", calls=(PARIS,), source=OWN, fmt=V11),
    Row("v11_reasoning_then_call", '[THINK]The user wants Paris.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        reasoning="The user wants Paris.", calls=(PARIS,), source=OWN, fmt=V11),
    Row("v11_reasoning_then_content", "[THINK]Easy.[/THINK]Hello, world!", reasoning="Easy.", content="Hello, world!",
        source=OWN, fmt=V11),
    Row("v11_end_of_sequence_after", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}</s>', calls=(PARIS,), source=OWN, fmt=V11),
]
