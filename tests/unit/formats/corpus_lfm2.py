"""Conformance corpus for the lfm2 family (LFM2 / LFM2.5: `<|tool_call_start|>[f(a=1)]<|tool_call_end|>`,
pythonic inside, or a JSON list in older templates).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "lfm2"
VLLM = "vLLM tests/tool_parsers/test_lfm2_tool_parser.py"
SGLANG = "SGLang test/registered/unit/function_call/test_lfm2_detector.py"
LLAMA_CPP = "llama.cpp models/templates/llama-cpp-lfm2.jinja (JSON calls with an optional id, text after)"
OLLAMA = "Ollama model/parsers/lfm2_test.go"
MLX = "mlx-lm tests (pythonic tool parser, LFM2 tool-call template)"
OWN = "toolserve's own row"

S, E = "<|tool_call_start|>", "<|tool_call_end|>"
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})


def block(calls: str) -> str:
    return f"{S}[{calls}]{E}"


ROWS = [
    Row("no_call", "How can I help you today?", content="How can I help you today?", source=VLLM),
    Row("simple_single_quotes", block("get_weather(city='Paris')"), calls=(PARIS,), source=VLLM),
    Row("simple_double_quotes", block('get_weather(city="Paris")'), calls=(PARIS,), source=SGLANG),
    Row("two_arguments", block('get_weather(city="London", unit="c")'),
        calls=(("get_weather", {"city": "London", "unit": "c"}),), source=SGLANG),
    Row("every_python_literal", block("record(s='John Doe', i=37, o={'city': 'San Francisco', 'state': 'CA'}, "
                                      "n=None, b=True, a=['John', 'Johnny'])"),
        calls=(("record", {"s": "John Doe", "i": 37, "o": {"city": "San Francisco", "state": "CA"}, "n": None,
                           "b": True, "a": ["John", "Johnny"]}),), source=VLLM),
    Row("parameterless", block("get_time()"), calls=(TIME,), source=VLLM),
    Row("empty_dict_argument", block("record(s='x', o={})"), calls=(("record", {"s": "x", "o": {}}),), source=VLLM),
    Row("empty_list_argument", block("record(s='x', a=[])"), calls=(("record", {"s": "x", "a": []}),), source=VLLM),
    Row("set_argument_is_a_list", block("record(s='x', a={'urgent', 'bug'})"), calls=(("record", {"s": "x", "a": ["urgent", "bug"]}),),
        source=VLLM),
    # `07` is no Python 3 literal; the model means the decimal 7 (vLLM reads it so)
    Row("zero_padded_integer", block("record(s='x', i=07)"), calls=(("record", {"s": "x", "i": 7}),), source=VLLM),
    Row("escaped_quotes", block(r"""get_weather(city='Martha\'s Vineyard', unit='\"c\"')"""),
        calls=(("get_weather", {"city": "Martha's Vineyard", "unit": '"c"'}),), source=VLLM),
    # agentic shell commands: the model does not escape a quote of the string's own kind; a quote
    # closes the string only where `,` `)` `]` `}` or `:` follows it
    Row("unescaped_inner_quotes", block("code_interpreter(code='sed -n '360,450p' /testbed/common.py')"),
        calls=(("code_interpreter", {"code": "sed -n '360,450p' /testbed/common.py"}),), source=VLLM),
    Row("bracket_inside_string", block("code_interpreter(code='grep -F \"]\" log.txt')"),
        calls=(("code_interpreter", {"code": 'grep -F "]" log.txt'}),), source=VLLM),
    Row("raw_newlines_inside_string", block("code_interpreter(code='cat > f.py << EOF\nimport csv\nprint(1)\nEOF')"),
        calls=(("code_interpreter", {"code": "cat > f.py << EOF\nimport csv\nprint(1)\nEOF"}),), source=VLLM),
    Row("nul_byte_inside_string", block("code_interpreter(code='printf a\x00b')"),
        calls=(("code_interpreter", {"code": "printf a\x00b"}),), source=VLLM),
    Row("unescaped_double_quotes_html", block('code_interpreter(code="<canvas id="game">\n</canvas>")'),
        calls=(("code_interpreter", {"code": '<canvas id="game">\n</canvas>'}),), source=MLX),
    Row("commas_inside_single_quotes", block("code_interpreter(code='# Hello, world!')"),
        calls=(("code_interpreter", {"code": "# Hello, world!"}),), source=MLX),
    Row("parallel_calls", block("get_weather(city='Paris'), brave_search(query='restaurants')"),
        calls=(PARIS, ("brave_search", {"query": "restaurants"})), source=SGLANG),
    Row("three_calls", block("get_weather(city='Paris'), get_time(), record(s='x', a=[])"),
        calls=(PARIS, TIME, ("record", {"s": "x", "a": []})), source=VLLM),
    Row("space_after_start_token", f"{S} [get_weather(city='Paris')]{E}", calls=(PARIS,), source=VLLM),
    Row("text_before", "Sure! " + block("get_weather(city='Paris')"), content="Sure!", calls=(PARIS,), source=SGLANG),
    # LFM2.5 writes its answer after the call block
    Row("text_after", block("get_weather(city='Paris')") + "\nChecking the current weather in Paris.",
        content="Checking the current weather in Paris.", calls=(PARIS,), source=VLLM),
    Row("text_before_and_after", "Let me check. " + block("get_weather(city='Paris')") + "\nDone.",
        content="Let me check.\nDone.", calls=(PARIS,), source=VLLM),
    # a call to a tool that was not offered is left out, its siblings kept (vLLM and SGLang)
    Row("unknown_sibling_left_out", block("get_weather(city='Paris'), bad(x=b'z')"), calls=(PARIS,), source=VLLM),
    Row("unknown_first_sibling_left_out", block("bad(x=1), get_weather(city='Paris')"), calls=(PARIS,), source=VLLM),
    Row("json_list_inside", S + '[{"name": "brave_search", "arguments": {"query": "sglang"}}]' + E,
        calls=(("brave_search", {"query": "sglang"}),), source=SGLANG),
    Row("json_list_with_id_then_text", S + '[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}]' + E
        + "It is sunny.", content="It is sunny.", calls=(PARIS,), source=LLAMA_CPP),
    Row("json_object_inside", S + '{"name": "brave_search", "arguments": {"query": "sglang"}}' + E,
        calls=(("brave_search", {"query": "sglang"}),), source=OWN),
    Row("im_end_after_call", block("get_weather(city='Paris')") + "<|im_end|>", calls=(PARIS,), source=OWN),
    # an empty block names no call; vLLM reports none and toolserve keeps the block as the text it
    # was (a block that is no call is never dropped)
    Row("empty_block_is_text", block(""), content=block(""), source=VLLM),
    Row("blank_block_is_text", block(" "), content=block(" "), source=VLLM),
    Row("string_never_closed_is_text", block("code_interpreter(code='const player = { x: 0, y: 1 };)"),
        content=block("code_interpreter(code='const player = { x: 0, y: 1 };)"), source=MLX),
    Row("only_unknown_tool_is_text", block("bad(x=1)"), content=block("bad(x=1)"), source=SGLANG),
    # LFM2 sometimes repeats the call's body after the block, closed by a second end token: vLLM
    # drops the echo; toolserve keeps it as content (never drops the model's text) and makes no
    # second call of it
    # -- Ollama's chunk-boundary table (each with and without a thinking block before it)
    Row("unicode_before", "Vérifions 🌍." + block('get_weather(city="Paris")'), content="Vérifions 🌍.", calls=(PARIS,),
        source=OLLAMA),
    Row("consecutive_blocks", block('get_weather(city="Paris")') + block('get_weather(city="Paris")'),
        calls=(PARIS, PARIS), source=OLLAMA),
    Row("content_between_blocks", block('get_weather(city="Paris")') + "Checking again." + block('get_weather(city="Paris")'),
        content="Checking again.", calls=(PARIS, PARIS), source=OLLAMA),
    Row("ordinary_angle_brackets", "Use <html> or compare 1 < 2.\n", content="Use <html> or compare 1 < 2.", source=OLLAMA),
    Row("nonmatching_tag", "Example: <|tool_call_started|>", content="Example: <|tool_call_started|>", source=OLLAMA),
    Row("truncated_tag_at_end", "Example: <|tool_call_sta", content="Example: <|tool_call_sta", source=OLLAMA),
    Row("nested_literals", "Processing data." + block("record(s='x', a=['item1','item2'], o={'enabled': True, "
                                                      "'threshold': 0.95})"),
        content="Processing data.", calls=(("record", {"s": "x", "a": ["item1", "item2"],
                                                       "o": {"enabled": True, "threshold": 0.95}}),), source=OLLAMA),
    Row("lowercase_true", block('record(s="test", i=42, b=true)'), calls=(("record", {"s": "test", "i": 42, "b": True}),),
        source=OLLAMA),
    Row("two_calls_no_space", block("brave_search(query='ls'),brave_search(query='pwd')"),
        calls=(("brave_search", {"query": "ls"}), ("brave_search", {"query": "pwd"})), source=OLLAMA),
    # -- reasoning (LFM2 thinking models)
    Row("think_then_call", "<think>Check the weather.</think>" + block('get_weather(city="Paris")'),
        reasoning="Check the weather.", calls=(PARIS,), source=OLLAMA),
    Row("think_then_text_then_call", "<think>Let me check the weather...</think>I'll get that for you."
        + block('get_weather(city="Paris")'), reasoning="Let me check the weather...", content="I'll get that for you.",
        calls=(PARIS,), source=OLLAMA),
    Row("think_then_answer", "<think>Let me think:\n- Point 1\n- Point 2</think>\n\nHere's my answer.",
        reasoning="Let me think:\n- Point 1\n- Point 2", content="Here's my answer.", source=OLLAMA),
    Row("only_thinking", "<think>Just thinking content</think>", reasoning="Just thinking content", source=OLLAMA),
    Row("echoed_body_after_block_is_content", block("get_weather(city='Paris')") + "[get_weather(city='Paris')]" + E,
        content="[get_weather(city='Paris')]" + E, calls=(PARIS,), source=VLLM),
]
