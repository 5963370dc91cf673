"""Conformance corpus for the generic_json family (any model whose template knows no tools: the
whole answer is one JSON object, `{"tool_calls": [...]}`, `{"tool_call": {...}}` or
`{"response": "..."}`, llama.cpp's generic format).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "generic_json"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (generic format: google-gemma-2-2b-it, Phi-3.5-mini)"
LLAMA_CPP_SCHEMA = "llama.cpp common/chat.cpp common_chat_params_init_generic (the output schema)"
OWN = "toolserve's own row"

PARIS = ("get_weather", {"city": "Paris"})

ROWS = [
    Row("response_pretty_printed", '{\n  "response": "Hello, world!\\nWhat\'s up?"\n}', content="Hello, world!\nWhat's up?",
        source=LLAMA_CPP),
    Row("response_tight", '{"response":"Hello"}', content="Hello", source=LLAMA_CPP_SCHEMA),
    Row("one_call", '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}', calls=(PARIS,),
        source=LLAMA_CPP_SCHEMA),
    Row("one_call_spaced", '{ "tool_call" : { "name" : "get_weather", "arguments" : { "city" : "Paris" } } }', calls=(PARIS,),
        source=LLAMA_CPP),
    # with parallel calls the schema asks for a list whose entries carry an "id" (the model's
    # own; toolserve gives each call its own id)
    Row("call_list_with_ids", '{\n  "tool_calls": [\n    {\n      "name": "get_weather",\n      "arguments": {\n'
        '        "city": "Paris"\n      },\n      "id": "123456789"\n    }\n  ]\n}', calls=(PARIS,), source=LLAMA_CPP),
    Row("two_calls", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call1"}, '
        '{"name": "get_time", "arguments": {}, "id": "call2"}]}', calls=(PARIS, ("get_time", {})), source=LLAMA_CPP_SCHEMA),
    Row("arguments_before_name", '{"tool_call": {"arguments": {"city": "Paris"}, "name": "get_weather"}}', calls=(PARIS,),
        source=OWN),
    Row("every_json_type", '{"tool_call": {"name": "record", "arguments": {"s": "x", "i": 1, "f": 2.5, "b": false, '
        '"n": null, "a": [1, "z"], "o": {"k": {}}}}}',
        calls=(("record", {"s": "x", "i": 1, "f": 2.5, "b": False, "n": None, "a": [1, "z"], "o": {"k": {}}}),), source=OWN),
    # cut by the end of the output: a call whose arguments opened keeps what parsed
    Row("cut_inside_argument_key", '{ "tool_call" : { "name" : "get_weather", "arguments" : { "ci',
        calls=(("get_weather", {}),), source=LLAMA_CPP),
    Row("cut_after_a_member", '{"tool_call": {"name": "brave_search", "arguments": {"query": "servethehome homepage",',
        calls=(("brave_search", {"query": "servethehome homepage"}),), source=LLAMA_CPP),
    # cut before the arguments opened: llama.cpp shows a call with empty arguments (or nothing)
    # while streaming; at the end of the output toolserve keeps the text, as it is no call yet
    Row("cut_after_name_is_text", '{ "tool_call" : { "name" : "get_weather"',
        content='{ "tool_call" : { "name" : "get_weather"', source=LLAMA_CPP),
    Row("cut_inside_name_is_text", '{ "tool_call" : { "name" : "get_w', content='{ "tool_call" : { "name" : "get_w',
        source=LLAMA_CPP),
    Row("unknown_tool_is_text", '{"tool_call": {"name": "nope", "arguments": {}}}',
        content='{"tool_call": {"name": "nope", "arguments": {}}}', source=OWN),
    Row("other_json_is_text", '{"answer": 42}', content='{"answer": 42}', source=OWN),
    Row("plain_text_is_content", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
]
