"""Conformance corpus for the minimax_m2 family (MiniMax M2 / M2.1: `<minimax:tool_call><invoke name="n">
<parameter name="k">v</parameter></invoke></minimax:tool_call>`, reasoning in `<think>`).

Rows are written here from what the peers' parser suites accept (facts, not their code), in
toolserve's tools (formats_fixtures.TOOLS). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "minimax_m2"
VLLM = "vLLM tests/tool_parsers/test_minimax_m2_tool_parser.py"
VLLM_R = "vLLM tests/reasoning/test_minimax_m2_reasoning_parser.py"
SGLANG = "SGLang test/registered/unit/function_call/test_minimax_m2_detector.py"
OLLAMA = "Ollama model/parsers/minimaxm2_test.go"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (MiniMax-M2: <think> reasoning, content beside calls)"
OWN = "toolserve's own row"

B, BE = "<minimax:tool_call>", "</minimax:tool_call>"


def invoke(name: str, layout: str = "", **params: str) -> str:
    body = "".join(f'{layout}<parameter name="{k}">{v}</parameter>' for k, v in params.items())
    return f'<invoke name="{name}">{body}{layout}</invoke>'


def block(*invokes: str, layout: str = "") -> str:
    return B + layout + layout.join(invokes) + layout + BE


def sglang_block(name: str, **params: str) -> str:
    """SGLang's layout: a newline before each parameter and around the invoke."""
    return block(invoke(name, "\n", **params), layout="\n")


SEATTLE = ("get_weather", {"city": "Seattle"})

ROWS = [
    Row("plain_content", "Hello world", content="Hello world", source=VLLM),
    Row("text_before", "Let me check. " + block(invoke("get_weather", city="Seattle")), content="Let me check.",
        calls=(SEATTLE,), source=VLLM),
    Row("tight", block(invoke("get_weather", city="Seattle")), calls=(SEATTLE,), source=VLLM),
    Row("two_parameters", block(invoke("get_weather", city="Seattle", unit="c")),
        calls=(("get_weather", {"city": "Seattle", "unit": "c"}),), source=VLLM),
    Row("two_invokes_one_block", block(invoke("brave_search", query="OpenAI"), invoke("brave_search", query="Gemini")),
        calls=(("brave_search", {"query": "OpenAI"}), ("brave_search", {"query": "Gemini"})), source=VLLM),
    Row("different_tools_one_block", block(invoke("get_weather", city="NYC"), invoke("brave_search", query="AAPL")),
        calls=(("get_weather", {"city": "NYC"}), ("brave_search", {"query": "AAPL"})), source=VLLM),
    Row("newline_layout", sglang_block("get_weather", city="London", unit="c"),
        calls=(("get_weather", {"city": "London", "unit": "c"}),), source=SGLANG),
    Row("newline_layout_text_before", "Let me look that up. " + sglang_block("brave_search", query="sglang"),
        content="Let me look that up.", calls=(("brave_search", {"query": "sglang"}),), source=SGLANG),
    Row("two_blocks", sglang_block("get_weather", city="Tokyo") + sglang_block("brave_search", query="restaurants"),
        calls=(("get_weather", {"city": "Tokyo"}), ("brave_search", {"query": "restaurants"})), source=SGLANG),
    Row("typed_by_schema", sglang_block("record", s="x", i="7", b="true", f="3.14", a="[1, 2, 3]", o='{"key": "val"}'),
        calls=(("record", {"s": "x", "i": 7, "b": True, "f": 3.14, "a": [1, 2, 3], "o": {"key": "val"}}),),
        source=SGLANG),
    Row("nullable_null", sglang_block("record", s="x", n="null"), calls=(("record", {"s": "x", "n": None}),),
        source=VLLM),
    Row("nullable_value", sglang_block("record", s="x", n="5"), calls=(("record", {"s": "x", "n": 5}),), source=VLLM),
    # SGLang turns `null` into null whatever the schema; a string parameter keeps the text
    Row("null_text_for_string_parameter", sglang_block("record", s="null"), calls=(("record", {"s": "null"}),),
        source=SGLANG),
    Row("no_parameters", block(invoke("get_time", "\n"), layout="\n"), calls=(("get_time", {}),), source=OLLAMA),
    Row("empty_parameter_value", sglang_block("get_weather", city=""), calls=(("get_weather", {"city": ""}),),
        source=OLLAMA),
    Row("entity_kept_as_written", sglang_block("brave_search", query="AI &amp; Machine Learning"),
        calls=(("brave_search", {"query": "AI &amp; Machine Learning"}),), source=OLLAMA),
    Row("layout_newlines_around_value", sglang_block("get_weather", city="\nTokyo\n"),
        calls=(("get_weather", {"city": "Tokyo"}),), source=OLLAMA),
    # Ollama trims spaces around a value; toolserve keeps a string as written (one layout newline
    # on each side aside)
    Row("spaces_around_value_kept", sglang_block("get_weather", city="  San Francisco  "),
        calls=(("get_weather", {"city": "  San Francisco  "}),), source=OLLAMA),
    Row("json_object_for_object_parameter", sglang_block("record", o='{"keywords": ["AI", "news"]}', s="x"),
        calls=(("record", {"o": {"keywords": ["AI", "news"]}, "s": "x"}),), source=OLLAMA),
    Row("text_between_blocks", sglang_block("get_weather", city="Tokyo") + "\nSome text.\n"
        + sglang_block("brave_search", query="news"), content="Some text.",
        calls=(("get_weather", {"city": "Tokyo"}), ("brave_search", {"query": "news"})), source=OLLAMA),
    Row("text_after_block", sglang_block("get_weather", city="Tokyo") + "\nHere is the weather.",
        content="Here is the weather.", calls=(("get_weather", {"city": "Tokyo"}),), source=OLLAMA),
    # a parameter left unclosed ends at the next parameter, </invoke> or the block's end
    Row("parameter_close_missing", B + '\n<invoke name="get_weather">\n<parameter name="city">Tokyo</invoke>\n' + BE,
        calls=(("get_weather", {"city": "Tokyo"}),), source=OLLAMA),
    Row("parameter_close_missing_before_next", B + '\n<invoke name="get_weather">\n<parameter name="city">Tokyo\n'
        '<parameter name="unit">c</parameter>\n</invoke>\n' + BE,
        calls=(("get_weather", {"city": "Tokyo", "unit": "c"}),), source=OWN),
    Row("invoke_close_missing", B + '\n<invoke name="get_weather">\n<parameter name="city">Tokyo</parameter>\n' + BE,
        calls=(("get_weather", {"city": "Tokyo"}),), source=OLLAMA),
    Row("unquoted_names", B + "\n<invoke name=get_weather>\n<parameter name=city>Paris</parameter>\n</invoke>\n" + BE,
        calls=(("get_weather", {"city": "Paris"}),), source=OWN),
    Row("unknown_tool_is_text", sglang_block("nonexistent_func", x="1"), content=sglang_block("nonexistent_func", x="1"),
        source=SGLANG),
    # SGLang keeps a block with no closing tag as text; the call was announced, and a call cut by
    # the end of the output keeps what parsed
    Row("block_not_closed", B + '\n<invoke name="get_weather">\n<parameter name="city">Beijing</parameter>',
        calls=(("get_weather", {"city": "Beijing"}),), source=SGLANG),
    # -- reasoning: the template opens <think>, the model writes only </think>
    Row("think_then_call", "<think>Need the weather.</think>\n\n" + sglang_block("get_weather", city="Paris"),
        reasoning="Need the weather.", calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP),
    Row("reasoning_then_answer", "This is a reasoning section</think>This is the rest",
        reasoning="This is a reasoning section", content="This is the rest", thinking_open=True, source=VLLM_R),
    Row("reasoning_only", "This is a reasoning section</think>", reasoning="This is a reasoning section",
        thinking_open=True, source=VLLM_R),
    Row("reasoning_unfinished", "This is reasoning in progress", reasoning="This is reasoning in progress",
        thinking_open=True, source=VLLM_R),
    Row("reasoning_multiline", "First line\nSecond line</think>Response first line\nResponse second",
        reasoning="First line\nSecond line", content="Response first line\nResponse second", thinking_open=True,
        source=VLLM_R),
    Row("empty_reasoning", "</think>This is the response", content="This is the response", thinking_open=True,
        source=VLLM_R),
    Row("special_characters", "Let me think... 1+1=2, right?</think>Yes, 1+1=2.", reasoning="Let me think... 1+1=2, right?",
        content="Yes, 1+1=2.", thinking_open=True, source=VLLM_R),
    Row("code_in_reasoning", "```python\nprint('hello')\n```</think>Here is the code.",
        reasoning="```python\nprint('hello')\n```", content="Here is the code.", thinking_open=True, source=VLLM_R),
    # a second </think> in the answer is dropped (vLLM strips it too)
    Row("double_close", "reasoning</think>content A</think>content B", reasoning="reasoning",
        content="content Acontent B", thinking_open=True, source=VLLM_R),
    # a call written inside <think> is thinking, not a call (Ollama; vLLM splits the reasoning off
    # before it looks for calls)
    Row("call_inside_think_is_reasoning", "<think>Maybe I should call " + block(invoke("get_weather", city="Tokyo"))
        + "</think>", reasoning="Maybe I should call " + block(invoke("get_weather", city="Tokyo")), source=OLLAMA),
    Row("call_inside_opened_think_is_reasoning", "I need the weather" + sglang_block("get_weather", city="Paris")
        + "</think>Calling now." + sglang_block("get_weather", city="Paris"),
        reasoning="I need the weather" + sglang_block("get_weather", city="Paris"), content="Calling now.",
        calls=(("get_weather", {"city": "Paris"}),), thinking_open=True, source=OLLAMA),
    Row("think_between_content", "Let me think. <think>This is complex.</think> Okay, done.",
        reasoning="This is complex.", content="Let me think.\nOkay, done.", source=OLLAMA),
    Row("two_think_blocks", "<think>First thought</think> Some content. <think>Second thought</think>",
        reasoning="First thought\nSecond thought", content="Some content.", source=OLLAMA),
    Row("no_open_prompt_is_content", "This is reasoning in progress", content="This is reasoning in progress",
        source=VLLM_R),
]
