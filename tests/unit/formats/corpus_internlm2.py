"""Conformance corpus for the internlm2 family (InternLM 2 / 2.5:
`<|action_start|><|plugin|>` newline `{"name": n, "parameters": {...}}` `<|action_end|>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "internlm2"
VLLM = "vLLM tests/tool_parsers/test_internlm2_tool_parser.py"
LMDEPLOY = "lmdeploy InternLM2 chat-template test (tool call in an assistant turn)"
OWN = "toolserve's own row"

A, E = "<|action_start|><|plugin|>", "<|action_end|>"
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    Row("tight", f'{A}{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}{E}', calls=(PARIS,), source=VLLM),
    Row("newline_after_plugin", f'{A}\n{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}{E}<|im_end|>',
        calls=(PARIS,), source=LMDEPLOY),
    Row("text_before", f'Sure, I will search for the weather of Paris.{A}\n{{"name": "get_weather", '
        f'"parameters": {{"city": "Paris"}}}}{E}', content="Sure, I will search for the weather of Paris.",
        calls=(PARIS,), source=LMDEPLOY),
    Row("text_before_with_space", f'Let me check the weather for you. {A}{{"name": "get_weather", '
        f'"parameters": {{"city": "Paris"}}}}{E}', content="Let me check the weather for you.", calls=(PARIS,),
        source=VLLM),
    Row("arguments_key", f'{A}{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}{E}', calls=(PARIS,),
        source=VLLM),
    Row("empty_parameters", f'{A}{{"name": "get_time", "parameters": {{}}}}{E}', calls=(TIME,), source=VLLM),
    Row("every_json_type_pretty_printed", f'{A}{{\n  "name": "record",\n  "parameters": {{\n    "s": "hello",\n'
        '    "i": 42,\n    "f": 3.14,\n    "b": true,\n    "n": null,\n    "a": ["a", "b", "c"],\n'
        f'    "o": {{"nested": "value"}}\n  }}\n}}{E}',
        calls=(("record", {"s": "hello", "i": 42, "f": 3.14, "b": True, "n": None, "a": ["a", "b", "c"],
                           "o": {"nested": "value"}}),), source=VLLM),
    Row("escaped_strings", f'{A}{{\n  "name": "record",\n  "parameters": {{\n    "s": "He said \\"hello\\"",\n'
        f'    "o": {{"path": "C:\\\\Users\\\\file.txt", "newline": "line1\\nline2", "unicode": "emoji: 🎉"}}\n  }}\n}}{E}',
        calls=(("record", {"s": 'He said "hello"', "o": {"path": "C:\\Users\\file.txt", "newline": "line1\nline2",
                                                          "unicode": "emoji: 🎉"}}),), source=VLLM),
    # vLLM reads only the first action block; two blocks in a row are two calls here
    Row("two_blocks", f'{A}\n{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}{E}\n'
        f'{A}\n{{"name": "get_time", "parameters": {{}}}}{E}', calls=(PARIS, TIME), source=OWN),
    Row("no_call", "This is a regular response without any tool calls.",
        content="This is a regular response without any tool calls.", source=VLLM),
    # a tool the request did not offer is never a call (vLLM's whitelist regression test)
    Row("unknown_tool_is_text", f'{A}{{"name": "delete_everything", "parameters": {{"city": "Tokyo"}}}}{E}',
        content=f'{A}{{"name": "delete_everything", "parameters": {{"city": "Tokyo"}}}}{E}', source=VLLM),
    # vLLM's malformed inputs: none is a call
    Row("parameters_not_an_object", f'{A}{{"name": "get_weather", "parameters": "not a dict"}}{E}',
        content=f'{A}{{"name": "get_weather", "parameters": "not a dict"}}{E}', source=VLLM),
    Row("not_json", f"{A}not json{E}", content=f"{A}not json{E}", source=VLLM),
    Row("marker_alone", A, content=A, source=VLLM),
    Row("action_start_without_plugin", '<|action_start|>{"name": "get_weather"}',
        content='<|action_start|>{"name": "get_weather"}', source=VLLM),
    # cut inside its arguments: the call stays with what the model wrote, closed
    Row("cut_inside_parameters", f'{A}{{"name": "get_weather", "parameters": {{', calls=(("get_weather", {}),),
        source=VLLM),
    Row("cut_inside_value", f'{A}{{"name": "get_weather", "parameters": {{"city": "Par',
        calls=(("get_weather", {"city": "Par"}),), source=OWN),
]
