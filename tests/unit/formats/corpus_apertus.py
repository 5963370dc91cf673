"""Conformance corpus for the apertus family (Apertus:
`<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>`, reasoning `<|inner_prefix|>…<|inner_suffix|>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). A variant that toolserve could only accept by
inventing calls from plain text stays an expected non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "apertus"
VLLM = "vLLM tests/tool_parsers/test_apertus_tool_parser.py"
SGLANG = "SGLang Apertus function-call detector tests (text before and after the block)"
LLAMA_CPP = "llama.cpp common/chat-parsers apertus (reasoning opened by the template)"
OWN = "toolserve's own row"

P, S = "<|tools_prefix|>", "<|tools_suffix|>"
TO, TC = "<|inner_prefix|>", "<|inner_suffix|>"
LONDON = ("get_weather", {"city": "London"})
TIME = ("get_time", {})

ROWS = [
    Row("one_call", f'{P}[{{"get_weather": {{"city": "London"}}}}]{S}', calls=(LONDON,), source=VLLM),
    Row("two_arguments", f'{P}[{{"get_weather": {{"city": "San Francisco", "unit": "c"}}}}]{S}',
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),), source=VLLM),
    Row("text_before", f'Let me check the weather for you. {P}[{{"get_weather": {{"city": "Paris"}}}}]{S}',
        content="Let me check the weather for you.", calls=(("get_weather", {"city": "Paris"}),), source=VLLM),
    Row("two_calls", f'{P}[{{"get_weather": {{"city": "London"}}}}, {{"get_time": {{}}}}]{S}', calls=(LONDON, TIME),
        source=VLLM),
    Row("nested_arguments", f'{P}[{{"record": {{"o": {{"inner": "value"}}, "a": ["a", "b"]}}}}]{S}',
        calls=(("record", {"o": {"inner": "value"}, "a": ["a", "b"]}),), source=VLLM),
    # cut by max_tokens: the call keeps what the model wrote (vLLM's partial-JSON fallback)
    Row("incomplete_call", f'{P}[{{"get_weather": {{"city": "London"}}', calls=(LONDON,), source=VLLM),
    Row("missing_suffix", f'{P}[{{"get_weather": {{"city": "San Francisco", "unit": "c"}}}}]',
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),), source=VLLM),
    Row("text_before_and_after", f'before{P}[{{"get_weather": {{"city": "Paris"}}}}, {{"get_time": {{}}}}]{S}after',
        content="before\nafter", calls=(("get_weather", {"city": "Paris"}), TIME), source=SGLANG),
    Row("trailing_space", f'Hi {P}[{{"get_weather": {{"city": "London"}}}}]{S} ', content="Hi", calls=(LONDON,),
        source=VLLM),
    Row("no_call", "Hello, how can I help you today?", content="Hello, how can I help you today?", source=VLLM),
    Row("reasoning_then_call", f'{TO}I need to check this.{TC}\n{P}[{{"get_weather": {{"city": "London"}}}}]{S}',
        reasoning="I need to check this.", calls=(LONDON,), source=LLAMA_CPP),
    Row("reasoning_opened_by_template", f"The user says hi.{TC}Hello!<|assistant_end|>", reasoning="The user says hi.",
        content="Hello!", thinking_open=True, source=LLAMA_CPP),
    Row("unknown_tool_is_text", f'{P}[{{"nope": {{}}}}]{S}', content=f'{P}[{{"nope": {{}}}}]{S}', source=OWN),
    Row("not_json_is_text", f"{P}get_weather(London){S}", content=f"{P}get_weather(London){S}", source=OWN),
    # Hermes-style entries are no Apertus call: "name" is no tool
    Row("name_arguments_entry_is_text", f'{P}[{{"name": "get_weather", "arguments": {{}}}}]{S}',
        content=f'{P}[{{"name": "get_weather", "arguments": {{}}}}]{S}', source=OWN),
]
