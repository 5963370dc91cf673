"""Conformance corpus for the jamba family (Jamba 1.5+:
`<tool_calls>[{"name": n, "arguments": {...}}, ...]</tool_calls>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "jamba"
VLLM = "vLLM tests/tool_parsers/test_jamba_tool_parser.py"
CARD = "AI21 Jamba model card (chat template: tool calls in an assistant turn)"
OWN = "toolserve's own row"

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
W2 = '{"name": "get_weather", "arguments": {"city": "Tokyo", "unit": "c"}}'
PARIS = ("get_weather", {"city": "Paris"})
TOKYO = ("get_weather", {"city": "Tokyo", "unit": "c"})
TIME = ("get_time", {})

ROWS = [
    # the space is the template's, after `<|assistant|>`; vLLM keeps it as content, it is whitespace here
    Row("leading_space_list_on_lines", f" <tool_calls>[\n    {W}\n]</tool_calls>", calls=(PARIS,), source=VLLM),
    Row("text_before", f" Sure! let me call the tool for you.<tool_calls>[\n    {W}\n]</tool_calls>",
        content="Sure! let me call the tool for you.", calls=(PARIS,), source=VLLM),
    Row("two_calls", f" <tool_calls>[\n    {W},\n    {W2}\n]</tool_calls>", calls=(PARIS, TOKYO), source=VLLM),
    Row("tight_then_end_of_message", f"<tool_calls>[{W}]</tool_calls><|eom|>", calls=(PARIS,), source=CARD),
    Row("arguments_after_a_comma_split", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", '
        '"unit": "c"}}]</tool_calls>', calls=(("get_weather", {"city": "Paris", "unit": "c"}),), source=VLLM),
    Row("empty_arguments", '<tool_calls>[{"name": "get_time", "arguments": {}}]</tool_calls>', calls=(TIME,),
        source=OWN),
    Row("no_call", "This is a test", content="This is a test", source=VLLM),
    # toolserve keeps text after the calls (vLLM keeps only the text before)
    Row("text_after", f"<tool_calls>[{W}]</tool_calls>\nDone.", content="Done.", calls=(PARIS,), source=OWN),
    Row("unknown_tool_is_text", '<tool_calls>[{"name": "nope", "arguments": {}}]</tool_calls>',
        content='<tool_calls>[{"name": "nope", "arguments": {}}]</tool_calls>', source=OWN),
    Row("not_json_is_text", "<tool_calls>get_weather(Paris)</tool_calls>",
        content="<tool_calls>get_weather(Paris)</tool_calls>", source=OWN),
    Row("unterminated_block", f"<tool_calls>[{W}]", calls=(PARIS,), source=OWN),
    Row("cut_inside_arguments", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa',
        calls=(("get_weather", {"city": "Pa"}),), source=OWN),
]
