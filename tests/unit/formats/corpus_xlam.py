"""Conformance corpus for the xlam family (Salesforce xLAM-2: the answer is a JSON list
`[{"name": n, "arguments": {...}}, ...]`, also fenced, after `[TOOL_CALLS]` or in `<tool_call>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "xlam"
VLLM = "vLLM tests/tool_parsers/test_xlam_tool_parser.py"
TEMPLATE = "vLLM examples/tool_chat_template_xlam_llama.jinja (calls as one JSON array)"
OWN = "toolserve's own row"

W = '{"name": "get_weather", "arguments": {"city": "Dallas", "unit": "f"}}'
W2 = '{"name": "get_weather", "arguments": {"city": "Orlando", "unit": "f"}}'
DALLAS = ("get_weather", {"city": "Dallas", "unit": "f"})
ORLANDO = ("get_weather", {"city": "Orlando", "unit": "f"})

ROWS = [
    Row("parallel_list", f"[{W}, {W2}]", calls=(DALLAS, ORLANDO), source=VLLM),
    Row("single_list", '[{"name": "get_weather", "arguments": {"city": "Seattle"}}]',
        calls=(("get_weather", {"city": "Seattle"}),), source=VLLM),
    Row("list_then_end_of_turn", f"[{W}]<|eot_id|>", calls=(DALLAS,), source=TEMPLATE),
    # vLLM keeps `<think>…</think>` in the content; toolserve splits it off as reasoning
    Row("think_then_list", f"<think>I'll help you with that.</think>[{W}]", reasoning="I'll help you with that.",
        calls=(DALLAS,), source=VLLM),
    Row("text_then_json_fence", f"I'll help you with that.\n```json\n[{W}]\n```", content="I'll help you with that.",
        calls=(DALLAS,), source=VLLM),
    Row("json_fence_alone", f"```json\n[{W}]\n```", calls=(DALLAS,), source=VLLM),
    Row("fence_without_language", f"```\n[{W}]\n```", calls=(DALLAS,), source=VLLM),
    Row("text_then_tool_calls_marker", f"I'll check the weather for you.[TOOL_CALLS][{W}]",
        content="I'll check the weather for you.", calls=(DALLAS,), source=VLLM),
    Row("tool_calls_marker_at_start", f"[TOOL_CALLS][{W}]", calls=(DALLAS,), source=VLLM),
    Row("text_then_tool_call_tags", f"I'll help you check the weather.<tool_call>[{W}]</tool_call>",
        content="I'll help you check the weather.", calls=(DALLAS,), source=VLLM),
    Row("tool_call_tags_one_object", f"<tool_call>{W}</tool_call>", calls=(DALLAS,), source=VLLM),
    Row("no_call", "This is a test", content="This is a test", source=VLLM),
    Row("empty_list_is_text", "[]", content="[]", source=TEMPLATE),
    # prose that starts with `[`, or fenced code that is no call, stays content
    Row("list_literal_is_content", "[1, 2, 3] are the first numbers.", content="[1, 2, 3] are the first numbers.",
        source=OWN),
    Row("python_fence_is_content", "```python\nprint(1)\n```", content="```python\nprint(1)\n```", source=OWN),
    Row("json_fence_not_a_call", '```json\n{"answer": 42}\n```', content='```json\n{"answer": 42}\n```', source=OWN),
    # a bare list is a call only as the whole answer (vLLM: only when the output starts with `[`)
    Row("bare_list_after_prose_is_content", f"Calls look like [{W}]", content=f"Calls look like [{W}]", source=VLLM),
    Row("unknown_tool_is_text", '[{"name": "nope", "arguments": {}}]', content='[{"name": "nope", "arguments": {}}]',
        source=OWN),
    Row("cut_inside_arguments", '[{"name": "get_weather", "arguments": {"city": "Dal',
        calls=(("get_weather", {"city": "Dal"}),), source=VLLM),
]
