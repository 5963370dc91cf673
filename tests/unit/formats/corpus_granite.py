"""Conformance corpus for the granite family (Granite 3.x: `<|tool_call|>[{"name": n, "arguments": {...}}]`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "granite"
VLLM = "vLLM tests/tool_parsers/test_granite_tool_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (Granite 3.3)"
VLLM_THINKING = "vLLM tests/reasoning/test_granite_thinking_reasoning_parser.py"
VLLM_REASONING = "vLLM tests/reasoning/test_granite_reasoning_parser.py"
OWN = "toolserve's own row"

PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    Row("tight", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=(PARIS,), source=LLAMA_CPP),
    Row("space_after_marker", '<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        calls=(PARIS,), source=VLLM),
    Row("two_calls_on_lines", '<|tool_call|> [\n  {"name": "get_weather", "arguments": {"city": "Paris"}},\n'
        '  {"name": "get_time", "arguments": {}}\n]', calls=(PARIS, TIME), source=VLLM),
    Row("empty_arguments", '<|tool_call|> [{"name": "get_time", "arguments": {}}]', calls=(TIME,), source=VLLM),
    Row("every_json_type_pretty_printed", '<|tool_call|> [{\n  "name": "record",\n  "arguments": {\n    "s": "hello",\n'
        '    "i": 42,\n    "f": 3.14,\n    "b": true,\n    "n": null,\n    "a": ["a", "b", "c"],\n    "o": {"nested": "value"}\n  }\n}]',
        calls=(("record", {"s": "hello", "i": 42, "f": 3.14, "b": True, "n": None, "a": ["a", "b", "c"],
                           "o": {"nested": "value"}}),), source=VLLM),
    Row("escaped_strings", '<|tool_call|> [{"name": "record", "arguments": {"s": "He said \\"hello\\"", '
        '"o": {"path": "C:\\\\Users\\\\file.txt", "newline": "line1\\nline2", "unicode": "emoji: 🎉"}}}]',
        calls=(("record", {"s": 'He said "hello"', "o": {"path": "C:\\Users\\file.txt", "newline": "line1\nline2",
                                                          "unicode": "emoji: 🎉"}}),), source=VLLM),
    # vLLM xfails its own parser on this one (surrounding text); toolserve keeps both texts as content
    Row("text_before_and_after", 'Let me check the weather for you.\n<|tool_call|> [{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}]\nI\'ll get that information.',
        content="Let me check the weather for you.\nI'll get that information.", calls=(PARIS,), source=VLLM),
    # Granite 3.1's marker written as text; vLLM reads it as `<|tool_call|>`
    Row("string_marker", '<tool_call> [{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=(PARIS,), source=VLLM),
    Row("string_marker_pretty_printed", '<tool_call> [{\n  "name": "record",\n  "arguments": {\n    "s": "hello",\n'
        '    "a": [],\n    "o": {}\n  }\n}]', calls=(("record", {"s": "hello", "a": [], "o": {}}),), source=VLLM),
    # the text marker alone, or before what is no call of a known tool, stays the model's text
    Row("string_marker_in_prose", "Write <tool_call> to call a tool.", content="Write <tool_call> to call a tool.", source=OWN),
    Row("string_marker_unknown_tool", '<tool_call> [{"name": "nope", "arguments": {}}]',
        content='<tool_call> [{"name": "nope", "arguments": {}}]', source=OWN),
    # vLLM lists a lone object after the marker as malformed; `<|tool_call|>` is a special token,
    # never prose, and what follows is one call
    Row("object_not_in_list", '<|tool_call|> {"name": "get_time", "arguments": {}}', calls=(TIME,), source=VLLM),
    # cut inside its arguments: the call stays, closed with what parsed (no key or value added;
    # llama.cpp returns the partial key as arguments text)
    Row("cut_inside_arguments", '<|tool_call|> [{"name": "get_weather", "arguments": {', calls=(("get_weather", {}),),
        source=VLLM),
    Row("cut_inside_argument_key", '<|tool_call|>[{"name": "get_weather", "arguments": {"ci',
        calls=(("get_weather", {}),), source=LLAMA_CPP),
    Row("arguments_not_an_object_without_marker", '[{"name": "get_weather", "arguments": "not a dict"}]',
        content='[{"name": "get_weather", "arguments": "not a dict"}]', source=VLLM),
    Row("no_call", "This is a regular response without any tool calls.",
        content="This is a regular response without any tool calls.", source=VLLM),
    Row("plain_answer", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    # bare JSON with no marker could be prose quoting JSON: content (vLLM: no call either)
    Row("bare_list_without_marker", 'Some text [{"name": "get_weather"}]', content='Some text [{"name": "get_weather"}]',
        source=VLLM),
    Row("end_of_text_after", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end_of_text|>',
        calls=(PARIS,), source=OWN),
    # thinking (Granite 3.2 / 3.3): <think> reasoning, the answer in a <response> wrapper
    Row("think_and_response_wrapper", "<think>I'm\nthinking</think><response>Hello, world!\nWhat's up?</response>",
        reasoning="I'm\nthinking", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("response_wrapper_cut_before_close", "<think>I'm\nthinking</think><response>Hello, world!\nWhat's up?",
        reasoning="I'm\nthinking", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("think_without_wrapper", "<think>I'm\nthinking</think>Hello, world!\nWhat's up?", reasoning="I'm\nthinking",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("newlines_between_parts", "<think>line1\nline2</think>\n\n<response>\nresult1\nresult2\n</response>\n",
        reasoning="line1\nline2", content="result1\nresult2", source=VLLM_THINKING),
    Row("wrapper_then_end_of_text", "<think>r</think><response>c</response><|end_of_text|>", reasoning="r", content="c",
        source=OWN),
    Row("reasoning_only", "<think>reasoning</think>", reasoning="reasoning", source=VLLM_THINKING),
    Row("unterminated_reasoning", "<think>reasoning only", reasoning="reasoning only", source=VLLM_THINKING),
    Row("wrapper_then_call", '<think>Need the weather.</think><response><|tool_call|>[{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}]</response>', reasoning="Need the weather.", calls=(PARIS,), source=OWN),
    # the wrapper is the answer's only where it opens right after </think> and closes at the end
    Row("close_tag_followed_by_text_is_text", "<think>r</think><response>Write </response> to end.",
        reasoning="r", content="Write </response> to end.", source=OWN),
    Row("response_tags_without_reasoning_are_text", "<response>Hello</response>", content="<response>Hello</response>",
        source=OWN),
    Row("response_tags_in_prose", "Wrap it in <response> and </response>.",
        content="Wrap it in <response> and </response>.", source=OWN),
    # Granite 3.2's plain-text markers: ordinary words, so they stay content (vLLM's granite
    # reasoning parser splits on them)
    Row("plain_text_thought_markers_are_content", "Here is my thought process: two plus two.\nHere is my response: 4",
        content="Here is my thought process: two plus two.\nHere is my response: 4", source=VLLM_REASONING),
]
