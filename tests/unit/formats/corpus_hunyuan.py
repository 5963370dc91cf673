"""Conformance corpus for the hunyuan family (Hunyuan A13B:
`<tool_calls>[{"name": n, "arguments": {...}}, ...]</tool_calls>`, reasoning
`<think>...</think>` and the answer in `<answer>...</answer>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "hunyuan"
VLLM = "vLLM tests/tool_parsers/test_hunyuan_a13b_tool_parser.py"
VLLM_REASONING = "vLLM vllm/reasoning/hunyuan_a13b_reasoning_parser.py (think / answer boundaries)"
TEMPLATE = "Hunyuan-A13B chat template (rendered tool-call turn and 助手： answers)"
OWN = "toolserve's own row"

W = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
PARIS = ("get_weather", {"city": "Paris", "unit": "c"})
TIME = ("get_time", {})
RECORD = ("record", {"s": "John Doe", "i": 37, "o": {"city": "San Francisco", "state": "CA"}, "n": None, "b": True,
                     "a": ["John", "Johnny"]})

ROWS = [
    Row("one_call", f"<tool_calls>[{W}]</tool_calls>", calls=(PARIS,), source=VLLM),
    Row("two_calls_every_json_type", f'<tool_calls>[{W}, {{"name": "record", "arguments": {{"s": "John Doe", "i": 37, '
        '"o": {"city": "San Francisco", "state": "CA"}, "n": null, "b": true, "a": ["John", "Johnny"]}}]</tool_calls>',
        calls=(PARIS, RECORD), source=VLLM),
    Row("text_before", f"I will call the tool now. <tool_calls>[{W}]</tool_calls>", content="I will call the tool now.",
        calls=(PARIS,), source=VLLM),
    # vLLM drops the text after the block; toolserve never drops the model's text
    Row("text_after_kept", f"<tool_calls>[{W}]</tool_calls>\nThank you!", content="Thank you!", calls=(PARIS,),
        source=VLLM),
    Row("nested_arguments", '<tool_calls>[{"name": "record", "arguments": {"o": {"level1": {"level2": {"value": 123}}}}}]'
        "</tool_calls>", calls=(("record", {"o": {"level1": {"level2": {"value": 123}}}}),), source=VLLM),
    Row("non_ascii", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "北京"}}]</tool_calls>',
        calls=(("get_weather", {"city": "北京"}),), source=VLLM),
    Row("empty_arguments_first", '<tool_calls>[{"name": "get_time", "arguments": {}}, ' + W + "]</tool_calls>",
        calls=(TIME, PARIS), source=VLLM),
    Row("empty_arguments_last", "<tool_calls>[" + W + ', {"name": "get_time", "arguments": {}}]</tool_calls>',
        calls=(PARIS, TIME), source=VLLM),
    Row("call_then_answer_close", f"<tool_calls>[{W}]</tool_calls>\n</answer>", calls=(PARIS,), source=VLLM),
    Row("no_call", "How can I help you today?", content="How can I help you today?", source=VLLM),
    Row("think_then_answer", "<think>\nThe user greets me.\n</think>\n<answer>\nHello! How can I help?\n</answer>",
        reasoning="The user greets me.", content="Hello! How can I help?", source=VLLM_REASONING),
    Row("fast_think_empty", "<think>\n\n</think>\n<answer>\nHello!\n</answer>", content="Hello!", source=VLLM_REASONING),
    Row("answer_without_close", "<think>\nShort.\n</think>\n<answer>\nHello!", reasoning="Short.", content="Hello!",
        source=VLLM_REASONING),
    Row("think_then_call", f"<think>\nNeed the weather.\n</think>\n<answer>\n<tool_calls>[{W}]</tool_calls>\n</answer>",
        reasoning="Need the weather.", calls=(PARIS,), source=VLLM_REASONING),
    # the template asks for answers that start with 助手： ("assistant:"); vLLM removes the label
    Row("assistant_label_removed", "助手：Thanks. I am doing well.", content="Thanks. I am doing well.",
        source=TEMPLATE),
    Row("end_of_turn_dropped", f"<tool_calls>[{W}]</tool_calls><|eos|>", calls=(PARIS,), source=TEMPLATE),
    Row("unknown_tool_is_text", '<tool_calls>[{"name": "nope", "arguments": {}}]</tool_calls>',
        content='<tool_calls>[{"name": "nope", "arguments": {}}]</tool_calls>', source=OWN),
    Row("cut_inside_arguments", '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Par',
        calls=(("get_weather", {"city": "Par"}),), source=OWN),
    Row("thinking_open_by_template", "The user wants nothing.\n</think>\n<answer>\nOk.\n</answer>",
        reasoning="The user wants nothing.", content="Ok.", thinking_open=True, source=OWN),
]
