"""Conformance corpus for the hermes family (Hermes 2 Pro / 3, Qwen2.5 / Qwen3 `<tool_call>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). Each row: the model's text, the expected content,
reasoning and calls (name, arguments), and the peer suite the variant comes from. A variant
that toolserve could only accept by inventing calls from plain text stays an expected
non-call, with the reason beside it.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "hermes"
VLLM = "vLLM tests/tool_parsers/test_hermes_tool_parser.py"
SGLANG = "SGLang test_function_call_parser.py Qwen25Detector"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (Hermes 2 Pro)"
FORMATS_MD = "shared/design/formats.md hermes row (seen in the wild)"
ISSUE = "issue 16 (variants peers accept: several calls in one block)"

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
T = '{"name": "get_time", "arguments": {}}'
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    # -- the plain shape, with and without layout newlines
    Row("block_newlines", f"<tool_call>\n{W}\n</tool_call>", calls=(PARIS,), source=SGLANG),
    Row("block_tight", f"<tool_call>{W}</tool_call>", calls=(PARIS,), source=VLLM),
    Row("pretty_printed_json", '<tool_call>\n{"name": "get_weather",\n"arguments": {"city":\n"Paris", "unit": "c"}}\n</tool_call>',
        calls=(("get_weather", {"city": "Paris", "unit": "c"}),), source=VLLM),
    Row("object_on_indented_lines", '<tool_call>\n  {\n    "name": "get_weather", "arguments": {"city": "Paris"}\n  }\n</tool_call>',
        calls=(PARIS,), source=LLAMA_CPP),
    Row("spaces_and_tabs_around_tags", f"  <tool_call>  \t{W}\t  </tool_call>  \n", calls=(PARIS,), source=LLAMA_CPP),
    Row("crlf_layout", f"<tool_call>\r\n{W}\r\n</tool_call>\r\n", calls=(PARIS,), source=LLAMA_CPP),
    Row("blank_lines_inside", f"<tool_call>\n\n\n{W}\n\n</tool_call>", calls=(PARIS,), source=LLAMA_CPP),
    Row("spaces_inside_json", '<tool_call> { "name" : "get_weather" , "arguments" : { "city" : "Paris" } } </tool_call>',
        calls=(PARIS,), source=LLAMA_CPP),
    Row("boolean_argument", '<tool_call>\n{"name": "record", "arguments": {"s": "x", "b": true}}\n</tool_call>',
        calls=(("record", {"s": "x", "b": True}),), source=VLLM),
    # -- text around the calls
    Row("content_before_tight", f"Sure, let me check the weather.<tool_call>{W}</tool_call>",
        content="Sure, let me check the weather.", calls=(PARIS,), source=VLLM),
    Row("content_before_spaced", f"Let me check the weather. <tool_call>\n{W}\n</tool_call>",
        content="Let me check the weather.", calls=(PARIS,), source=SGLANG),
    Row("content_lines_before", f"Hello, world!\nWhat's up?<tool_call>\n{W}\n</tool_call>",
        content="Hello, world!\nWhat's up?", calls=(PARIS,), source=LLAMA_CPP),
    Row("no_call", "The weather in Paris is sunny today.", content="The weather in Paris is sunny today.", source=SGLANG),
    Row("closing_tag_only", "some text </tool_call> trailing", content="some text </tool_call> trailing", source=SGLANG),
    # -- unterminated: the last call runs to the end of the text
    Row("unterminated_until_eos", f"<tool_call>\n{W}", calls=(PARIS,), source=VLLM),
    Row("unterminated_trailing_newlines", f"<tool_call>\n{W}\n\n", calls=(PARIS,), source=VLLM),
    Row("unterminated_after_content", f"Ok.\n<tool_call>\n{T}", content="Ok.", calls=(TIME,), source=FORMATS_MD),
    Row("unterminated_last_of_two", f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{T}", calls=(PARIS, TIME), source=VLLM),
    Row("second_opens_before_first_closes", f"<tool_call>{W}<tool_call>{T}", calls=(PARIS, TIME), source=VLLM),
    Row("outer_brace_missing_before_close", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
        calls=(PARIS,), source=VLLM),
    # vLLM returns no call for `{"name": .., "arguments": {..}` with the outer brace missing at the
    # end of text; toolserve keeps the call, whose arguments object was complete (never extended)
    Row("outer_brace_missing_until_eos", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}',
        calls=(PARIS,), source=VLLM),
    # -- several calls
    Row("parallel_blocks_newline", f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{T}\n</tool_call>",
        calls=(PARIS, TIME), source=SGLANG),
    Row("parallel_blocks_adjacent", f"<tool_call>{W}</tool_call><tool_call>{T}</tool_call>", calls=(PARIS, TIME), source=VLLM),
    Row("two_objects_one_block_newline", f"<tool_call>\n{W}\n{T}\n</tool_call>", calls=(PARIS, TIME), source=ISSUE),
    Row("two_objects_one_block_blank_line", f"<tool_call>\n{W}\n\n{T}\n</tool_call>", calls=(PARIS, TIME), source=ISSUE),
    Row("two_objects_one_block_unterminated", f"<tool_call>\n{W}\n{T}", calls=(PARIS, TIME), source=ISSUE),
    Row("list_in_one_block", f"<tool_call>\n[{W}, {T}]\n</tool_call>", calls=(PARIS, TIME), source=FORMATS_MD),
    Row("malformed_block_then_valid", f"<tool_call>\n{{not valid json}}\n</tool_call>\n<tool_call>\n{T}\n</tool_call>",
        # the broken block is kept as text (never dropped silently), the valid one is a call
        content="<tool_call>\n{not valid json}\n</tool_call>", calls=(TIME,), source=SGLANG),
    # -- arguments spelled differently
    Row("arguments_as_json_string", '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>',
        calls=(PARIS,), source=VLLM),
    Row("arguments_as_json_string_tight", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
        calls=(PARIS,), source=VLLM),
    Row("arguments_as_json_string_unterminated", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
        calls=(PARIS,), source=VLLM),
    Row("arguments_empty_string", '<tool_call>\n{"name": "get_time", "arguments": ""}\n</tool_call>', calls=(TIME,), source=VLLM),
    Row("parameters_key", '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>',
        calls=(PARIS,), source=FORMATS_MD),
    Row("function_tag_inside_block", '<tool_call>\n<function=get_weather>{"city": "Paris"}</function>\n</tool_call>',
        calls=(PARIS,), source=FORMATS_MD),
    # vLLM passes `"arguments": "hello"` through as the JSON string "hello": arguments that are
    # not an object fit no tool schema, so toolserve keeps the block as text rather than invent `{}`
    Row("arguments_plain_string_not_a_call", '<tool_call>{"name": "get_weather", "arguments": "hello"}</tool_call>',
        content='<tool_call>{"name": "get_weather", "arguments": "hello"}</tool_call>', source=VLLM),
    # -- reasoning
    Row("think_then_call", f"<think>I'm\nthinking</think>\n<tool_call>{W}</tool_call>",
        reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("think_opened_by_template", f"I'm\nthinking</think>\n<tool_call>{W}</tool_call>",
        reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP, thinking_open=True),
    Row("think_then_content", "<think>I'm thinking</think>Hello, world!\nWhat's up?",
        content="Hello, world!\nWhat's up?", reasoning="I'm thinking", source=LLAMA_CPP),
    # -- ambiguous with plain text: expected non-calls (see the reason on each)
    # llama.cpp reads bare JSON `{"name": .., "arguments": ..}` as a call; a hermes model answering
    # with a JSON example would then call a tool it only described, so it stays content
    Row("bare_json_not_a_call", W, content=W, source=LLAMA_CPP),
    # llama.cpp also reads a ```json fence holding a call object; the same ambiguity: content
    Row("fenced_json_not_a_call", f"```json\n{W}\n```", content=f"```json\n{W}\n```", source=LLAMA_CPP),
]
