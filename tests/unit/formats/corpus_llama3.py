"""Conformance corpus for the Llama 3.x families: `llama3_json` (the JSON tool prompt:
`{"name": n, "parameters": {...}}`, optional `<|python_tag|>`, `;`-joined) and `llama3_builtin`
(Llama 3.1 built-in tools: `<|python_tag|>brave_search.call(query="...")`, plain code for
code_interpreter, custom tools in the JSON form).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "llama3_json"
BUILTIN = "llama3_builtin"
VLLM = "vLLM tests/tool_parsers/test_llama3_json_tool_parser.py"
SGLANG = "SGLang test/registered/unit/function_call/test_llama32_detector.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (meta-llama Llama-3.1 / 3.2 / 3.3 templates)"
MODEL_CARD = "Meta Llama 3.1 model card (built-in tools: ipython, <|python_tag|>, <|eom_id|>)"
OWN = "toolserve's own row"

PT = "<|python_tag|>"
Q1 = '{"name": "brave_search", "parameters": {"query": "test1"}}'
T = '{"name": "get_time", "parameters": {}}'
Q2 = '{"name": "brave_search", "parameters": {"query": "test2"}}'
S1, S2 = ("brave_search", {"query": "test1"}), ("brave_search", {"query": "test2"})
TIME = ("get_time", {})
BEIJING = ("get_weather", {"city": "Beijing"})
HEY = ("code_interpreter", {"code": "print('hey')"})

ROWS = [
    # -- llama3_json
    Row("no_call", "This is just some text without any tool calls", content="This is just some text without any tool calls",
        source=VLLM),
    Row("parameters_key", '{"name": "brave_search", "parameters": {"query": "test query", "limit": 10}}',
        calls=(("brave_search", {"query": "test query", "limit": 10}),), source=VLLM),
    Row("arguments_key", '{"name": "brave_search", "arguments": {"query": "test"}}',
        calls=(("brave_search", {"query": "test"}),), source=VLLM),
    Row("template_layout", '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP),
    Row("type_function_key", '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}',
        calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP),
    Row("three_joined_semicolon_space", f"{Q1}; {T}; {Q2}", calls=(S1, TIME, S2), source=VLLM),
    Row("three_joined_spaced_semicolon", f"{Q1} ; {T} ; {Q2}", calls=(S1, TIME, S2), source=VLLM),
    Row("joined_bare_semicolon", f"{Q1};{T}", calls=(S1, TIME), source=VLLM),
    Row("joined_semicolon_newline", f"{Q1};\n{T}", calls=(S1, TIME), source=VLLM),
    Row("joined_newline", f"{Q1}\n{T}", calls=(S1, TIME), source=VLLM),
    Row("deeply_nested_arguments", '{"name": "record", "parameters": {"s": "x", "o": {"l1": {"l2": {"l3": {"l4": '
        '{"value": "deep"}}}}}}}', calls=(("record", {"s": "x", "o": {"l1": {"l2": {"l3": {"l4": {"value": "deep"}}}}}}),),
        source=VLLM),
    Row("brackets_inside_strings", '{"name": "record", "parameters": {"s": "test {value} [complex]","o": {"inner": '
        '"more {brackets}"}}}', calls=(("record", {"s": "test {value} [complex]", "o": {"inner": "more {brackets}"}}),),
        source=VLLM),
    Row("escaped_quotes", '{"name": "record", "parameters": {"s": "He said \\"Hello {world}\\""}}',
        calls=(("record", {"s": 'He said "Hello {world}"'}),), source=VLLM),
    Row("brace_in_text_after", f"{Q1} I used {{brave_search}} for this.", content="I used {brave_search} for this.",
        calls=(S1,), source=VLLM),
    Row("json_in_text_after", f'{Q1} The arguments I passed were {{"query": "test1"}}',
        content='The arguments I passed were {"query": "test1"}', calls=(S1,), source=VLLM),
    Row("python_tag", PT + '{"name": "get_weather", "arguments": {"city": "Beijing"}}', calls=(BEIJING,), source=SGLANG),
    Row("text_before_python_tag", "Let me check. " + PT + '{"name": "get_weather", "arguments": {"city": "Tokyo"}}',
        content="Let me check.", calls=(("get_weather", {"city": "Tokyo"}),), source=SGLANG),
    Row("python_tag_two_calls", PT + '{"name": "get_weather", "arguments": {"city": "Beijing"}};'
        '{"name": "brave_search", "arguments": {"query": "restaurants"}}',
        calls=(BEIJING, ("brave_search", {"query": "restaurants"})), source=SGLANG),
    # after the special token, SGLang also reads the object written as a Python dict
    Row("python_tag_python_dict", PT + "{'name': 'get_weather', 'arguments': {'city': 'Beijing'}}", calls=(BEIJING,),
        source=SGLANG),
    Row("eom_after_call", '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
        calls=(("get_weather", {"city": "Paris"}),), source=MODEL_CARD),
    # vLLM asks for parameters; a name alone is a call without arguments here
    Row("name_without_parameters", '{"name": "get_time"}', calls=(TIME,), source=VLLM),
    # arguments that break after they opened keep what parsed (the call was announced); vLLM
    # returns the text
    Row("broken_arguments_keep_what_parsed", '{"name": "brave_search", "parameters": {invalid json}',
        content="invalid json}", calls=(("brave_search", {}),), source=VLLM),
    # -- expected non-calls
    Row("missing_name", '{"parameters": {}}', content='{"parameters": {}}', source=VLLM),
    Row("plain_json_is_content", '{"answer": 42}', content='{"answer": 42}', source=OWN),
    # vLLM finds the object anywhere in the text; a JSON example inside an answer would then run:
    # bare JSON is a call only at the start of the answer (after <|python_tag|> anywhere)
    Row("json_after_prose_is_content", 'Here is the result: {"name": "get_time", "parameters": {}} Would you like to '
        'know more?', content='Here is the result: {"name": "get_time", "parameters": {}} Would you like to know more?',
        source=VLLM),
    # -- llama3_builtin
    Row("builtin_code_interpreter_call", PT + "code_interpreter.call(code=\"print('hey')\")", calls=(HEY,),
        source=LLAMA_CPP, fmt=BUILTIN),
    Row("builtin_brave_search", PT + 'brave_search.call(query="current weather in Menlo Park, California")<|eom_id|>',
        calls=(("brave_search", {"query": "current weather in Menlo Park, California"}),), source=MODEL_CARD,
        fmt=BUILTIN),
    Row("builtin_plain_code", PT + 'import sys\n\nprint("Python version: ", sys.version)<|eom_id|>',
        calls=(("code_interpreter", {"code": 'import sys\n\nprint("Python version: ", sys.version)'}),),
        source=MODEL_CARD, fmt=BUILTIN),
    Row("builtin_text_before", 'Let me search. <|python_tag|>brave_search.call(query="x")<|eom_id|>',
        content="Let me search.", calls=(("brave_search", {"query": "x"}),), source=OWN, fmt=BUILTIN),
    Row("builtin_two_tags", PT + 'brave_search.call(query="a")\n' + PT + 'brave_search.call(query="b")',
        calls=(("brave_search", {"query": "a"}), ("brave_search", {"query": "b"})), source=OWN, fmt=BUILTIN),
    # with built-in tools on, custom tools are still called in the JSON form (llama.cpp's
    # Llama 3.x format with built-in tools reads both)
    Row("builtin_custom_tool_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP, fmt=BUILTIN),
    Row("builtin_custom_tool_json_after_tag", PT + '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        calls=(("get_weather", {"city": "Paris"}),), source=SGLANG, fmt=BUILTIN),
    Row("builtin_answer", "The answer is 4.<|eot_id|>", content="The answer is 4.", source=MODEL_CARD, fmt=BUILTIN),
    # llama.cpp's suite offers a tool named `python`; a built-in call to a tool the request did not
    # offer stays the text it was
    Row("builtin_tool_not_offered_is_text", PT + "python.call(code=\"print('hey')\")",
        content=PT + "python.call(code=\"print('hey')\")", source=LLAMA_CPP, fmt=BUILTIN),
]
