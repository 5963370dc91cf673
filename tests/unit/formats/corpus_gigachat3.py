"""Conformance corpus for the gigachat3 family (GigaChat 3: `<|message_sep|>` blank line
`function call<|role_sep|>` newline `{"name": n, "arguments": {...}}`; GigaChat 3.1:
`<|function_call|>{...}`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "gigachat3"
VLLM = "vLLM tests/tool_parsers/test_gigachat3_tool_parser.py"
TEMPLATE = "llama.cpp models/templates/GigaChat3-10B-A1.8B.jinja (function call role)"
OWN = "toolserve's own row"

SEP, HEAD, V31 = "<|message_sep|>\n\n", "function call<|role_sep|>\n", "<|function_call|>"
SIMPLE = '{"name": "record", "arguments": {"s": "create", "a": ["preferences"]}}'
SIMPLE_CALL = ("record", {"s": "create", "a": ["preferences"]})
COMPLEX = ('{"name": "record", "arguments": {"s": "create", "o": {"short_answers": true, "hate_emojis": true, '
           '"english_ui": false}}}')
COMPLEX_CALL = ("record", {"s": "create", "o": {"short_answers": True, "hate_emojis": True, "english_ui": False}})
TIME = ("get_time", {})

ROWS = [
    Row("simple", f"{SEP}{HEAD}{SIMPLE}", calls=(SIMPLE_CALL,), source=VLLM),
    Row("parameterless", f'{SEP}{HEAD}{{"name": "get_time", "arguments": {{}}}}', calls=(TIME,), source=VLLM),
    Row("complex", f"{SEP}{HEAD}{COMPLEX}", calls=(COMPLEX_CALL,), source=VLLM),
    Row("content_then_call", f"I'll check that for you.{SEP}{HEAD}{SIMPLE}", content="I'll check that for you.",
        calls=(SIMPLE_CALL,), source=VLLM),
    Row("content_then_call_then_eos", f"I'll check that for you.{SEP}{HEAD}{SIMPLE}</s>",
        content="I'll check that for you.", calls=(SIMPLE_CALL,), source=VLLM),
    Row("v31_simple", f"{V31}{SIMPLE}", calls=(SIMPLE_CALL,), source=VLLM),
    Row("v31_parameterless", f'{V31}{{"name": "get_time", "arguments": {{}}}}', calls=(TIME,), source=VLLM),
    Row("v31_complex", f"{V31}{COMPLEX}", calls=(COMPLEX_CALL,), source=VLLM),
    Row("v31_content_then_call_then_eos", f"I'll check that for you.{V31}{SIMPLE}</s>",
        content="I'll check that for you.", calls=(SIMPLE_CALL,), source=VLLM),
    Row("no_call", "How can I help you today?", content="How can I help you today?", source=VLLM),
    Row("answer_ends_with_message_sep", f"Hello!{SEP}", content="Hello!", source=TEMPLATE),
    # the role name alone is ordinary text; only the special `<|role_sep|>` after it makes a call
    Row("role_name_in_prose", "A function call is how I use tools.", content="A function call is how I use tools.",
        source=OWN),
    Row("unknown_tool_is_text", f'{HEAD}{{"name": "nope", "arguments": {{}}}}',
        content=f'{HEAD}{{"name": "nope", "arguments": {{}}}}'.strip(), source=OWN),
    Row("cut_inside_arguments", f'{SEP}{HEAD}{{"name": "get_weather", "arguments": {{"city": "Mos',
        calls=(("get_weather", {"city": "Mos"}),), source=OWN),
]
