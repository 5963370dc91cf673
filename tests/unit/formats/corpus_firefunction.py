"""Conformance corpus for the firefunction family (FireFunction v2:
` functools[{"name": n, "arguments": {...}}, ...]`, no closing marker).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "firefunction"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (fireworks-ai-llama-3-firefunction-v2)"
TEMPLATE = "llama.cpp models/templates/fireworks-ai-llama-3-firefunction-v2.jinja (its system prompt)"
OWN = "toolserve's own row"

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
T = '{"name": "get_time", "arguments": {}}'
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    Row("plain_answer", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("one_call_leading_space", f" functools[{W}]", calls=(PARIS,), source=LLAMA_CPP),
    Row("one_call_no_space", f"functools[{W}]", calls=(PARIS,), source=TEMPLATE),
    # "all function calls should be generated in a single JSON list"
    Row("two_calls_one_list", f" functools[{W}, {T}]", calls=(PARIS, TIME), source=TEMPLATE),
    Row("list_on_lines", f" functools[\n  {W},\n  {T}\n]", calls=(PARIS, TIME), source=TEMPLATE),
    # "if the type is number and format is float, write value 7 as 7.0"
    Row("float_written_with_point", ' functools[{"name": "record", "arguments": {"s": "x", "f": 7.0, "i": 7}}]',
        calls=(("record", {"s": "x", "f": 7.0, "i": 7}),), source=TEMPLATE),
    Row("end_of_turn_after_list", f" functools[{W}]<|eot_id|>", calls=(PARIS,), source=TEMPLATE),
    Row("text_before_call", f"Let me check. functools[{W}]", content="Let me check.", calls=(PARIS,), source=OWN),
    Row("text_after_call", f" functools[{W}] Done.", content="Done.", calls=(PARIS,), source=OWN),
    Row("arguments_as_json_string", ' functools[{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}]',
        calls=(PARIS,), source=OWN),
    Row("cut_inside_arguments", ' functools[{"name": "get_weather", "arguments": {"city": "Pa',
        calls=(("get_weather", {"city": "Pa"}),), source=OWN),
    # the marker is an ordinary word (Python's functools module): only a call list makes it a call
    Row("module_name_in_prose", "Use functools.partial for that.", content="Use functools.partial for that.", source=OWN),
    Row("marker_before_other_list", "functools[1, 2] is not a call", content="functools[1, 2] is not a call", source=OWN),
    Row("unknown_tool_is_text", ' functools[{"name": "nope", "arguments": {}}]',
        content='functools[{"name": "nope", "arguments": {}}]', source=OWN),
]
