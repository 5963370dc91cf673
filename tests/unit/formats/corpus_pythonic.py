"""Conformance corpus for the pythonic families: `pythonic` (Llama 3.2 / 3.3 python_list prompt:
`[f(a=1), g()]` as the whole answer) and `llama4_pythonic` (Llama 4:
`<|python_start|>[f(a=1)]<|python_end|>`, or the bare list).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "pythonic"
L4 = "llama4_pythonic"
VLLM = "vLLM tests/tool_parsers/test_pythonic_tool_parser.py"
VLLM_L4 = "vLLM tests/tool_parsers/test_llama4_pythonic_tool_parser.py"
SGLANG = "SGLang test/registered/unit/function_call/test_pythonic_detector.py"
MLX = "mlx-lm tests (pythonic tool parser)"
OWN = "toolserve's own row"

PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})
ALL = ("record", {"s": "John Doe", "i": 37, "o": {"city": "San Francisco", "state": "CA"}, "n": None, "b": True,
                  "a": ["John", "Johnny"]})
ALL_TEXT = "record(s='John Doe', i=37, o={'city': 'San Francisco', 'state': 'CA'}, n=None, b=True, a=['John', 'Johnny'])"
ESCAPED = r"""get_weather(city='Martha\'s Vineyard', unit='\"c\"')"""
ESCAPED_CALL = ("get_weather", {"city": "Martha's Vineyard", "unit": '"c"'})
PS, PE = "<|python_start|>", "<|python_end|>"

ROWS = [
    # -- pythonic
    Row("no_call", "How can I help you today?", content="How can I help you today?", source=VLLM),
    Row("simple", "[get_weather(city='San Francisco', unit='c')]",
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),), source=VLLM),
    Row("every_python_literal", f"[{ALL_TEXT}]", calls=(ALL,), source=VLLM),
    Row("parameterless", "[get_time()]", calls=(TIME,), source=VLLM),
    Row("empty_dict_argument", "[record(s='x', o={})]", calls=(("record", {"s": "x", "o": {}}),), source=VLLM),
    Row("empty_list_argument", "[record(s='x', a=[])]", calls=(("record", {"s": "x", "a": []}),), source=VLLM),
    Row("escaped_quotes", f"[{ESCAPED}]", calls=(ESCAPED_CALL,), source=VLLM),
    Row("parallel_calls", f"[get_weather(city='Paris'), {ALL_TEXT}]", calls=(PARIS, ALL), source=VLLM),
    Row("three_calls", "[get_weather(city='Paris'), get_time(), record(s='x', a=[])]",
        calls=(PARIS, TIME, ("record", {"s": "x", "a": []})), source=VLLM),
    Row("dict_argument", "[brave_search(query={'key': 'value', 'nested': {'a': 1}})]",
        calls=(("brave_search", {"query": {"key": "value", "nested": {"a": 1}}}),), source=SGLANG),
    Row("list_argument", "[brave_search(query=['a', 'b', 'c'])]", calls=(("brave_search", {"query": ["a", "b", "c"]}),),
        source=SGLANG),
    Row("integer_for_string_parameter", "[get_weather(city=123)]", calls=(("get_weather", {"city": 123}),), source=SGLANG),
    # SGLang ignores positional arguments (`{}`); toolserve puts them on the schema's parameters in
    # order, required first, as for gemma3_tool_code
    Row("positional_argument", "[get_weather('Tokyo')]", calls=(("get_weather", {"city": "Tokyo"}),), source=SGLANG),
    Row("bracket_inside_string", "[brave_search(query=\"]\")]", calls=(("brave_search", {"query": "]"}),), source=SGLANG),
    Row("commas_inside_single_quotes", "[code_interpreter(code='# Hello, world!')]",
        calls=(("code_interpreter", {"code": "# Hello, world!"}),), source=MLX),
    Row("nested_literal_argument", "[record(s='x', o={'position': [0, 1], 'enabled': True})]",
        calls=(("record", {"s": "x", "o": {"position": [0, 1], "enabled": True}}),), source=MLX),
    # unescaped inner double quotes and a raw newline, as models write HTML
    Row("unescaped_quotes_and_newline_html", '[code_interpreter(code="<canvas id="game">\n</canvas>")]',
        calls=(("code_interpreter", {"code": '<canvas id="game">\n</canvas>'}),), source=MLX),
    Row("eot_after_list", "[get_weather(city='Paris')]<|eot_id|>", calls=(PARIS,), source=OWN),
    # a call to a tool that was not offered is left out, its siblings kept (vLLM, SGLang)
    Row("unknown_first_sibling_left_out", "[bad(x=b'z'), get_weather(city='Paris')]", calls=(PARIS,), source=VLLM),
    Row("unparsable_sibling_left_out", "[get_weather(city='Paris'), f(a='x 'y', b='z')]", calls=(PARIS,), source=VLLM),
    # `1e999` is infinity, which JSON cannot hold: that argument is left out, the call kept (vLLM
    # drops the whole call)
    Row("non_finite_argument_left_out", "[record(s='x', f=1e999), get_weather(city='Paris')]",
        calls=(("record", {"s": "x"}), PARIS), source=VLLM),
    # Llama 4 on the pythonic format: its tags are read too
    Row("python_start_tags", f"{PS}[get_weather(city='Tokyo')]{PE}", calls=(("get_weather", {"city": "Tokyo"}),),
        source=SGLANG),
    # -- expected non-calls
    Row("unknown_tool_only", "[unknown_func(arg=1)]", content="[unknown_func(arg=1)]", source=SGLANG),
    Row("missing_value", "[get_weather(city=)]", content="[get_weather(city=)]", source=SGLANG),
    Row("mismatched_brackets", "[get_weather(x=1])]", content="[get_weather(x=1])]", source=VLLM),
    Row("non_literal_argument", "[code_interpreter(code=get_content())]",
        content="[code_interpreter(code=get_content())]", source=MLX),
    Row("string_never_closed", "[code_interpreter(code='const player = { x: 0, y: 1 };)]",
        content="[code_interpreter(code='const player = { x: 0, y: 1 };)]", source=MLX),
    Row("no_brackets", "get_weather(city='Tokyo')", content="get_weather(city='Tokyo')", source=SGLANG),
    # SGLang reads a list after prose; a bracketed call quoted in an answer would then run: the list
    # is a call only as the whole answer
    Row("list_after_prose_is_content", "I will check the weather for you. [get_weather(city='Tokyo')]",
        content="I will check the weather for you. [get_weather(city='Tokyo')]", source=SGLANG),
    # -- llama4_pythonic
    Row("l4_no_call", "How can I help you today?", content="How can I help you today?", source=VLLM_L4, fmt=L4),
    Row("l4_simple", "[get_weather(city='LA', unit='c')]", calls=(("get_weather", {"city": "LA", "unit": "c"}),),
        source=VLLM_L4, fmt=L4),
    Row("l4_every_python_literal", f"[{ALL_TEXT}]", calls=(ALL,), source=VLLM_L4, fmt=L4),
    Row("l4_parameterless", "[get_time()]", calls=(TIME,), source=VLLM_L4, fmt=L4),
    Row("l4_empty_dict_argument", "[record(s='x', o={})]", calls=(("record", {"s": "x", "o": {}}),), source=VLLM_L4,
        fmt=L4),
    Row("l4_empty_list_argument", "[record(s='x', a=[])]", calls=(("record", {"s": "x", "a": []}),), source=VLLM_L4,
        fmt=L4),
    Row("l4_escaped_quotes", f"[{ESCAPED}]", calls=(ESCAPED_CALL,), source=VLLM_L4, fmt=L4),
    Row("l4_parallel_no_spaces", "[get_weather(city='LA',unit='c'),record(s='Doe',i=9)]",
        calls=(("get_weather", {"city": "LA", "unit": "c"}), ("record", {"s": "Doe", "i": 9})), source=VLLM_L4, fmt=L4),
    Row("l4_python_tags", f"{PS}[get_weather(city='LA', unit='c')]{PE}",
        calls=(("get_weather", {"city": "LA", "unit": "c"}),), source=VLLM_L4, fmt=L4),
    Row("l4_python_start_without_end", f"{PS}[get_weather(city='LA', unit='c'),record(s='Doe', i=9)]",
        calls=(("get_weather", {"city": "LA", "unit": "c"}), ("record", {"s": "Doe", "i": 9})), source=VLLM_L4, fmt=L4),
    Row("l4_three_calls_tagged", f"{PS}[get_weather(city='LA', unit='c'), get_time(), record(s='x', a=[])]{PE}",
        calls=(("get_weather", {"city": "LA", "unit": "c"}), TIME, ("record", {"s": "x", "a": []})),
        source=VLLM_L4, fmt=L4),
    Row("l4_bare_calls_in_tags", f"{PS}get_weather(city='LA'){PE}", calls=(("get_weather", {"city": "LA"}),),
        source=SGLANG, fmt=L4),
    Row("l4_unknown_first_sibling_left_out", f"{PS}[bad(x=b'z'), get_weather(city='LA', unit='c')]{PE}",
        calls=(("get_weather", {"city": "LA", "unit": "c"}),), source=VLLM_L4, fmt=L4),
    Row("l4_text_before_tags", f"Let me see. {PS}[get_weather(city='LA')]{PE}", content="Let me see.",
        calls=(("get_weather", {"city": "LA"}),), source=OWN, fmt=L4),
    Row("l4_answer_after_tags", f"{PS}[get_weather(city='LA')]{PE}The weather follows.<|eot|>",
        content="The weather follows.", calls=(("get_weather", {"city": "LA"}),), source=OWN, fmt=L4),
    Row("l4_mismatched_brackets", f"{PS}[get_weather(x=1])]{PE}", content=f"{PS}[get_weather(x=1])]{PE}",
        source=VLLM_L4, fmt=L4),
]
