"""Conformance corpus for DeepSeek: V3 / R1 (`function<｜tool▁sep｜>n` + fenced JSON, format
deepseek_v3) and V3.1 (`n<｜tool▁sep｜>{...}`, format deepseek_v31), with R1-distill and V3.1
reasoning boundaries (`<think>` opened by the template: thinking_open).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "deepseek_v3"
V31 = "deepseek_v31"
VLLM_V3 = "vLLM tests/tool_parsers/test_deepseekv3_tool_parser.py"
VLLM_V31 = "vLLM tests/tool_parsers/test_deepseekv31_tool_parser.py"
VLLM_R1 = "vLLM tests/reasoning/test_deepseekr1_reasoning_parser.py"
SGLANG = "SGLang test_function_call_parser.py DeepSeekV3Detector / DeepSeekV31Detector"
LLAMA_CPP_R1 = "llama.cpp tests/test-chat.cpp (DeepSeek R1, llama-cpp-deepseek-r1 and R1-Distill templates)"
LLAMA_CPP_V31 = "llama.cpp tests/chat (DeepSeek V3.1 template)"

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3(name: str, args: str) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{args}\n```{CE}"


def v31(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


TOKYO = ("get_weather", {"city": "Tokyo", "unit": "c"})
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})
ALL_TYPES = ('{"s": "hello", "i": 42, "f": 3.14, "b": true, "n": null, "a": ["a", "b", "c"], '
             '"o": {"nested": "value", "empty_array": [], "empty_object": {}}}')
ALL_TYPES_CALL = ("record", {"s": "hello", "i": 42, "f": 3.14, "b": True, "n": None, "a": ["a", "b", "c"],
                             "o": {"nested": "value", "empty_array": [], "empty_object": {}}})
ESCAPED = '{"city": "He said \\"hello\\" in C:\\\\Users\\\\file line1\\nline2"}'
ESCAPED_CALL = ("get_weather", {"city": 'He said "hello" in C:\\Users\\file line1\nline2'})

ROWS = [
    # -- V3 / R1 call markers
    Row("v3_single", BEGIN + v3("get_weather", '{"city": "Tokyo", "unit": "c"}') + END, calls=(TOKYO,), source=VLLM_V3),
    Row("v3_parallel", BEGIN + v3("get_weather", '{"city": "Tokyo", "unit": "c"}') + v3("get_time", "{}") + END,
        calls=(TOKYO, TIME), source=VLLM_V3),
    Row("v3_every_json_type", BEGIN + v3("record", ALL_TYPES) + END, calls=(ALL_TYPES_CALL,), source=VLLM_V3),
    Row("v3_empty_arguments", BEGIN + v3("get_time", "{}") + END, calls=(TIME,), source=VLLM_V3),
    Row("v3_text_before", "Let me check the weather for you." + BEGIN + v3("get_weather", '{"city": "Paris"}') + END,
        content="Let me check the weather for you.", calls=(PARIS,), source=VLLM_V3),
    Row("v3_escaped_strings", BEGIN + v3("get_weather", ESCAPED) + END, calls=(ESCAPED_CALL,), source=VLLM_V3),
    Row("v3_eos_after_calls", BEGIN + v3("get_time", "{}") + END + "<｜end▁of▁sentence｜>", calls=(TIME,),
        source=LLAMA_CPP_R1),
    Row("v3_calls_end_missing", BEGIN + v3("get_weather", '{"city": "Paris"}'), calls=(PARIS,), source=LLAMA_CPP_R1),
    # vLLM reports no call when the object's closing brace is missing; toolserve keeps the call the
    # model wrote, closing what it opened (no key or value added), as for a call cut off
    Row("v3_closing_brace_missing", BEGIN + f'{CB}function{SEP}get_weather\n```json\n{{"city": "Tokyo"\n```{CE}' + END,
        calls=(("get_weather", {"city": "Tokyo"}),), source=VLLM_V3),
    # the calls opener straight into `function<｜tool▁sep｜>` (no per-call begin marker): llama.cpp
    # reads it (its `<｜tool▁calls｜>` short form too); vLLM lists it as malformed
    Row("v3_no_call_begin", BEGIN + f'function{SEP}get_weather\n```json\n{{"city": "Paris"}}\n```' + END,
        calls=(PARIS,), source=VLLM_V3),
    Row("r1_short_opener", f'<｜tool▁calls｜>function{SEP}get_weather\n```json\n{{"city": "Paris"}}\n```{CE}{END}',
        calls=(PARIS,), source=LLAMA_CPP_R1),
    Row("r1_opener_underscores", "<｜tool_calls_begin｜>" + v3("get_time", "{}") + END, calls=(TIME,), source=LLAMA_CPP_R1),
    Row("r1_opener_spaces", "<｜tool calls begin｜>" + v3("get_time", "{}") + END, calls=(TIME,), source=LLAMA_CPP_R1),
    Row("r1_opener_escaped_underscores", "<｜tool\\_calls\\_begin｜>" + v3("get_time", "{}") + END, calls=(TIME,),
        source=LLAMA_CPP_R1),
    # a broken call after a valid one: the valid one stays; the broken one was announced when its
    # arguments opened, so it closes with what parsed (`{}`), as a cut call does (SGLang drops it)
    Row("v3_malformed_after_valid", "Sure. " + BEGIN + v3("get_weather", '{"city": "Paris"}') + v3("get_time", "{bad json")
        + END, content="Sure.", calls=(PARIS, TIME), source=SGLANG),
    Row("v3_no_call", "How can I help you today? I can check weather for you.",
        content="How can I help you today? I can check weather for you.", source=VLLM_V3),
    # -- R1 reasoning boundaries
    Row("r1_think_then_call", "<think>I'm\nthinking</think>\n\n" + BEGIN + v3("get_weather", '{"city": "Paris"}') + END,
        reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP_R1),
    Row("r1_open_think_then_call", "I'm\nthinking</think>\n\n" + BEGIN + v3("get_weather", '{"city": "Paris"}') + END,
        reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP_R1, thinking_open=True),
    Row("r1_open_reasoning_then_content", "This is a reasoning section</think>This is the rest",
        reasoning="This is a reasoning section", content="This is the rest", source=VLLM_R1, thinking_open=True),
    Row("r1_open_reasoning_only", "This is a reasoning section</think>", reasoning="This is a reasoning section",
        source=VLLM_R1, thinking_open=True),
    Row("r1_open_never_closed", "This is content", reasoning="This is content", source=VLLM_R1, thinking_open=True),
    Row("r1_open_multiple_lines", "This\nThat</think>This is the rest\nThat", reasoning="This\nThat",
        content="This is the rest\nThat", source=VLLM_R1, thinking_open=True),
    Row("r1_open_empty_reasoning", "</think>This is the rest", content="This is the rest", source=VLLM_R1,
        thinking_open=True),
    # the model repeats the `<think>` the template already wrote: it is not reasoning text
    Row("r1_open_think_repeated", "<think>This is a reasoning section</think>This is the rest",
        reasoning="This is a reasoning section", content="This is the rest", source=VLLM_R1, thinking_open=True),
    Row("r1_think_not_closed", "<think>This is a reasoning section", reasoning="This is a reasoning section",
        source=VLLM_R1),
    Row("r1_newline_before_think", "\n<think>This is a reasoning section</think>\nThis is the rest",
        reasoning="This is a reasoning section", content="This is the rest", source=VLLM_R1),
    Row("r1_open_no_reasoning_at_all", "Hello, world!\nWhat's up?", reasoning="Hello, world!\nWhat's up?",
        source=LLAMA_CPP_R1, thinking_open=True),
    # reasoning that mentions the opener in prose: no call can follow it, so it stays reasoning
    Row("r1_reasoning_mentions_opener",
        "I need to remember the correct syntax. It starts with <｜tool▁calls▁begin｜> and ends with",
        reasoning="I need to remember the correct syntax. It starts with <｜tool▁calls▁begin｜> and ends with",
        source=LLAMA_CPP_R1, thinking_open=True),
    # -- V3.1 call markers
    Row("v31_text_before", "normal text" + BEGIN + v31("get_weather", '{"city": "Paris"}') + END,
        content="normal text", calls=(PARIS,), source=VLLM_V31, fmt=V31),
    # vLLM drops the text after the calls; toolserve keeps every word the model wrote
    Row("v31_two_calls_text_around", "some prefix text" + BEGIN + v31("get_weather", '{"city": "Paris"}')
        + v31("get_time", "{}") + END + " some suffix text",
        content="some prefix text\nsome suffix text", calls=(PARIS, TIME), source=VLLM_V31, fmt=V31),
    Row("v31_cut_before_separator", "Let me look that up." + BEGIN + "get_weather",
        content="Let me look that up." + BEGIN + "get_weather", source=VLLM_V31, fmt=V31),
    # no per-call begin marker: vLLM lists it as unparsable; the special tokens cannot be prose,
    # and llama.cpp reads the same shape for R1, so toolserve takes the call
    Row("v31_no_call_begin", BEGIN + "get_time" + SEP + "{}" + END, calls=(TIME,), source=VLLM_V31, fmt=V31),
    Row("v31_model_card_shape", BEGIN + v31("get_weather", '{"city": "Tokyo"}') + END,
        calls=(("get_weather", {"city": "Tokyo"}),), source=LLAMA_CPP_V31, fmt=V31),
    Row("v31_content_then_two_calls", "CONTENT" + BEGIN + v31("get_time", "{}") + v31("get_weather", '{"city": "Paris"}')
        + END, content="CONTENT", calls=(TIME, PARIS), source=LLAMA_CPP_V31, fmt=V31),
    Row("v31_open_reasoning_then_call", "REASONING</think>" + BEGIN + v31("get_weather", '{"city": "Tokyo"}') + END,
        reasoning="REASONING", calls=(("get_weather", {"city": "Tokyo"}),), source=LLAMA_CPP_V31, fmt=V31,
        thinking_open=True),
    Row("v31_open_reasoning_then_content", "I'm\nthinking</think>Hello, world!\nWhat's up?", reasoning="I'm\nthinking",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP_V31, fmt=V31, thinking_open=True),
    # a call written before `</think>` ends the reasoning (formats.md). llama.cpp instead keeps such a
    # call as reasoning text when a `</think>` follows later; a stream cannot wait for a `</think>`
    # that may never come, so here both calls are calls and the text between them is content
    Row("v31_call_inside_reasoning_then_close", "REASONING" + BEGIN + v31("get_time", "{}") + END + "MORE</think>"
        + BEGIN + v31("get_weather", '{"city": "Tokyo"}') + END,
        reasoning="REASONING", content="MORE", calls=(TIME, ("get_weather", {"city": "Tokyo"})),
        source=LLAMA_CPP_V31, fmt=V31, thinking_open=True),
    # llama.cpp moves the text before the call to content once the output ends without `</think>`;
    # streamed, that text was already sent as reasoning, so it stays reasoning
    Row("v31_call_inside_reasoning_unclosed", "REASONING" + BEGIN + v31("get_weather", '{"city": "Tokyo"}') + END,
        reasoning="REASONING", calls=(("get_weather", {"city": "Tokyo"}),), source=LLAMA_CPP_V31, fmt=V31,
        thinking_open=True),
    Row("v31_malformed_after_valid", "Sure. " + BEGIN + v31("get_weather", '{"city": "Paris"}') + v31("get_time", "{bad json")
        + END, content="Sure.", calls=(PARIS, TIME), source=SGLANG, fmt=V31),
    Row("v31_no_call", "CONTENT", content="CONTENT", source=LLAMA_CPP_V31, fmt=V31),
]
