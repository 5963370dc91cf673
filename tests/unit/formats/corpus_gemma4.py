"""Conformance corpus for the gemma4 family (Gemma 4: `<|tool_call>call:n{k:<|"|>v<|"|>,…}<tool_call|>`,
reasoning in `<|channel>thought…<channel|>`).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "gemma4"
VLLM = "vLLM tests/tool_parsers/test_gemma4_tool_parser.py"
VLLM_BARE = "vLLM tests/tool_parsers/test_gemma4_regex_and_bare_calls.py"
VLLM_R = "vLLM tests/reasoning/test_gemma4_reasoning_parser.py"
VLLM_RT = "vLLM tests/reasoning/test_gemma4_reasoning_with_tool_call.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (google-gemma-4-31B-it)"
OLLAMA = "Ollama model/parsers/gemma4_test.go"
MLX = "mlx-lm tests/test_tool_parsing.py (gemma4)"
SGLANG = "SGLang test/registered/unit/function_call/test_gemma4_detector.py"
SGLANG_FLUSH = "SGLang Gemma4Detector finish() flush tests"
OWN = "toolserve's own row"

Q = '<|"|>'
TC, TE = "<|tool_call>", "<tool_call|>"
PARIS = ("get_weather", {"city": "Paris"})


def q(text: str) -> str:
    return Q + text + Q


def call(name: str, args: str) -> str:
    return f"{TC}call:{name}{{{args}}}{TE}"


ROWS = [
    Row("no_call", "Hello, how can I help you today?", content="Hello, how can I help you today?", source=VLLM),
    Row("one_string_argument", call("get_weather", f"city:{q('London')}"), calls=(("get_weather", {"city": "London"}),),
        source=VLLM),
    Row("string_with_comma", call("get_weather", f"city:{q('Paris, France')}"),
        calls=(("get_weather", {"city": "Paris, France"}),), source=VLLM),
    Row("two_arguments", call("get_weather", f"city:{q('San Francisco')},unit:{q('c')}"),
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),), source=VLLM),
    Row("text_before_call", "Let me check the weather for you. " + call("get_weather", f"city:{q('Paris')}"),
        content="Let me check the weather for you.", calls=(("get_weather", {"city": "Paris"}),), source=VLLM),
    Row("text_joined_before_call", "Hello, world!\nWhat's up?" + call("get_weather", f"city:{q('Paris')}"),
        content="Hello, world!\nWhat's up?", calls=(("get_weather", {"city": "Paris"}),), source=LLAMA_CPP),
    Row("two_blocks", call("get_weather", f"city:{q('London')}") + call("get_time", ""),
        calls=(("get_weather", {"city": "London"}), ("get_time", {})), source=VLLM),
    Row("two_blocks_on_lines", call("get_weather", f"city:{q('Paris')}") + "\n" + call("brave_search", f"query:{q('make -j8')}"),
        calls=(("get_weather", {"city": "Paris"}), ("brave_search", {"query": "make -j8"})), source=VLLM_BARE),
    Row("two_calls_in_one_block", f"{TC}call:get_weather{{city:{q('README*.md')}}}call:brave_search{{query:{q('weather')}}}{TE}",
        calls=(("get_weather", {"city": "README*.md"}), ("brave_search", {"query": "weather"})), source=MLX),
    Row("empty_arguments", call("get_time", ""), calls=(("get_time", {}),), source=LLAMA_CPP),
    Row("nested_object_and_array", call("record", f"s:{q('x')},o:{{inner:{q('value')}}},a:[{q('a')},{q('b')}]"),
        calls=(("record", {"s": "x", "o": {"inner": "value"}, "a": ["a", "b"]}),), source=VLLM),
    Row("number_boolean_float", call("record", f"s:{q('x')},b:true,i:42,f:3.14"),
        calls=(("record", {"s": "x", "b": True, "i": 42, "f": 3.14}),), source=VLLM),
    Row("negative_exponent_null", call("record", f"s:{q('x')},i:-7,f:1.5e10,n:null"),
        calls=(("record", {"s": "x", "i": -7, "f": 1.5e10, "n": None}),), source=LLAMA_CPP),
    Row("empty_array_and_object", call("record", f"s:{q('x')},a:[],o:{{}}"),
        calls=(("record", {"s": "x", "a": [], "o": {}}),), source=LLAMA_CPP),
    Row("big_integer", call("record", f"s:{q('x')},i:48838483920"), calls=(("record", {"s": "x", "i": 48838483920}),),
        source=MLX),
    Row("trailing_bare_false", call("record", f"s:{q('src/env.py')},b:false"),
        calls=(("record", {"s": "src/env.py", "b": False}),), source=VLLM),
    Row("quoted_object_key", call("record", f"s:{q('x')},o:{{{q('3')}:{q('new text')}}}"),
        calls=(("record", {"s": "x", "o": {"3": "new text"}}),), source=VLLM),
    Row("html_in_string", call("code_interpreter", "code:" + q('<!DOCTYPE html>\n<html lang="zh-CN">\n')),
        calls=(("code_interpreter", {"code": '<!DOCTYPE html>\n<html lang="zh-CN">\n'}),), source=VLLM),
    Row("braces_inside_string", call("code_interpreter", f"code:{q('use a dict like {key: value} in your code')}"),
        calls=(("code_interpreter", {"code": "use a dict like {key: value} in your code"}),), source=MLX),
    Row("multiline_string", call("code_interpreter", "code:" + q("date\n")),
        calls=(("code_interpreter", {"code": "date\n"}),), source=OLLAMA),
    Row("unescaped_quotes_in_strings", call("record", "s:" + q('say "hello", then "goodbye"') + ",a:[" + q("a") + "," + q('b "quoted"') + "]"),
        calls=(("record", {"s": 'say "hello", then "goodbye"', "a": ["a", 'b "quoted"']}),), source=OLLAMA),
    Row("backslashes_kept_as_written", call("record", "s:" + q('say \\"hi\\"') + ",o:{path:" + q("C:\\users\\bob") + "}"),
        calls=(("record", {"s": 'say \\"hi\\"', "o": {"path": "C:\\users\\bob"}}),), source=OLLAMA),
    # Gemma 4 sometimes writes a JSON string instead of a <|"|> one (Ollama reads both)
    Row("json_string_values", call("record", 's:"raw \\"quoted\\"",o:{note:' + q('gemma "quoted"') + "}"),
        calls=(("record", {"s": 'raw "quoted"', "o": {"note": 'gemma "quoted"'}}),), source=OLLAMA),
    Row("json_string_with_comma_and_colon", call("record", 's:"keep , oldText: literal",o:{note:' + q("ok") + "}"),
        calls=(("record", {"s": "keep , oldText: literal", "o": {"note": "ok"}}),), source=OLLAMA),
    Row("array_of_objects_mixed_quotes", call("record", "s:" + q("plan") + ",a:[{title:" + q('step "one"') + ",done:false},"
                                              "{title:\"step \\\"two\\\"\",done:true}]"),
        calls=(("record", {"s": "plan", "a": [{"title": 'step "one"', "done": False},
                                              {"title": 'step "two"', "done": True}]}),), source=OLLAMA),
    Row("text_before_and_after", "Some text before " + call("get_weather", f"city:{q('Tokyo')}") + " after",
        content="Some text before\nafter", calls=(("get_weather", {"city": "Tokyo"}),), source=SGLANG),
    Row("text_between_calls", "Hello! " + call("get_weather", f"city:{q('Paris')}") + " Let me also check "
        + call("get_time", f"timezone:{q('UTC')}"), content="Hello!\nLet me also check",
        calls=(("get_weather", {"city": "Paris"}), ("get_time", {"timezone": "UTC"})), source=SGLANG),
    Row("array_with_spaces_and_object", call("record", f"s:{q('New York')},a:[1, 2, {{inner:{q('val')}}}]"),
        calls=(("record", {"s": "New York", "a": [1, 2, {"inner": "val"}]}),), source=SGLANG),
    Row("mixed_array", call("record", f"s:{q('x')},a:[{q('hello')}, 42, true, {{key:{q('val')}}}]"),
        calls=(("record", {"s": "x", "a": ["hello", 42, True, {"key": "val"}]}),), source=SGLANG),
    Row("string_with_colon", call("brave_search", f"query:{q('http://example.com')}"),
        calls=(("brave_search", {"query": "http://example.com"}),), source=SGLANG),
    # single-quoted values (SGLang's flush test writes `{city: 'Paris'}`; Ollama repairs them)
    Row("single_quoted_value", f"{TC}call:get_weather{{city: 'Paris'}}{TE}", calls=(PARIS,), source=SGLANG_FLUSH),
    Row("single_quoted_value_with_comma_and_brace", f"{TC}call:record{{s:'a, b}}',i:1}}{TE}",
        calls=(("record", {"s": "a, b}", "i": 1}),), source=OLLAMA),
    Row("apostrophe_inside_a_bare_word", f"{TC}call:record{{s:O'Brien}}{TE}", calls=(("record", {"s": "O'Brien"}),),
        source=OWN),
    # cut after `k:`: SGLang flushes the whole text as content; toolserve has announced the call
    # when its arguments opened and keeps it with what parsed (nothing)
    Row("cut_after_key", f"hi {TC}call:get_weather{{city:", content="hi", calls=(("get_weather", {}),), source=SGLANG_FLUSH),
    # an unknown tool's block is text, less the dropped close token (SGLang returns a call with
    # tool index -1)
    Row("unknown_tool_is_text", call("unknown_func", f"arg:{q('val')}"), content=f"{TC}call:unknown_func{{arg:{q('val')}}}",
        source=SGLANG),
    # a schema type other than string types a <|"|> string too
    Row("quoted_integer_typed_by_schema", call("record", f"s:{q('x')},i:{q('7')}"), calls=(("record", {"s": "x", "i": 7}),),
        source=OWN),
    Row("text_after_call", call("get_weather", f"city:{q('Paris')}") + "<div>", content="<div>",
        calls=(("get_weather", {"city": "Paris"}),), source=VLLM),
    # ends and closes the model writes instead of, or after, <tool_call|>
    Row("turn_end_closes_the_call", f"{TC}call:get_weather{{city:{q('-batch -ex run')}}}<turn|>",
        calls=(("get_weather", {"city": "-batch -ex run"}),), source=VLLM_BARE),
    Row("repeated_close_marker", call("get_weather", f"city:{q('Paris')}") + TE + "Done.", content="Done.",
        calls=(("get_weather", {"city": "Paris"}),), source=OLLAMA),
    Row("tool_response_marker_after_call", call("get_weather", f"city:{q('Paris')}") + "<|tool_response>Done.",
        content="Done.", calls=(("get_weather", {"city": "Paris"}),), source=OLLAMA),
    Row("colon_before_call", f"{TC}:call:brave_search{{query:{q('pytest')}}}", calls=(("brave_search", {"query": "pytest"}),),
        source=VLLM_BARE),
    # cut short: the call keeps what was written (vLLM returns the text as content)
    Row("cut_inside_string", f"{TC}call:get_weather{{city:{q('London')[:-len(Q)]}", calls=(("get_weather", {"city": "London"}),),
        source=VLLM),
    Row("string_left_open_before_close", f"{TC}call:code_interpreter{{code:{Q}ls}}{TE}",
        calls=(("code_interpreter", {"code": "ls"}),), source=OLLAMA),
    Row("object_close_left_out_before_marker", f"{TC}call:get_weather{{city:{q('Paris')}{TE}",
        calls=(("get_weather", {"city": "Paris"}),), source=OLLAMA),
    Row("cut_number_left_out", f"{TC}call:record{{s:{q('x')},i:4", calls=(("record", {"s": "x"}),), source=VLLM),
    # bare `call:` without <|tool_call>: read where a content segment starts (vLLM reads it after
    # <channel|>); in the middle of prose it stays text, as it could be the model quoting syntax
    Row("bare_call_after_channel_close", "<|channel>thought\nI need to read the entry file.\n<channel|>"
        f"call:code_interpreter{{code:{q('cat /work/src/entry.c')}}}", reasoning="I need to read the entry file.",
        calls=(("code_interpreter", {"code": "cat /work/src/entry.c"}),), source=VLLM_BARE),
    Row("bare_call_as_whole_output", f"call:brave_search{{query:{q('gemma 4 release')}}}",
        calls=(("brave_search", {"query": "gemma 4 release"}),), source=VLLM_BARE),
    Row("bare_call_after_prose_is_text", f"some prose\ncall:brave_search{{query:{q('make -j8')}}}",
        content=f"some prose\ncall:brave_search{{query:{q('make -j8')}}}", source=VLLM_BARE),
    Row("call_tag_fragment_is_text", f"<call>get_weather{{city:{q('Paris')}}}", content=f"<call>get_weather{{city:{q('Paris')}}}",
        source=VLLM_BARE),
    Row("bare_call_word_in_prose", "call: me maybe", content="call: me maybe", source=OWN),
    Row("lone_call_marker_is_text", TC, content=TC, source=VLLM_R),
    # reasoning
    Row("thought_then_answer", "<|channel>thought\nActual reasoning here<channel|>Final answer",
        reasoning="Actual reasoning here", content="Final answer", source=VLLM_R),
    Row("thought_multiline", "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?", reasoning="I'm\nthinking",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("empty_thought", "<|channel>thought<channel|>Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?",
        source=LLAMA_CPP),
    Row("empty_thought_only", "<|channel>thought\n<channel|>", source=VLLM_R),
    Row("channel_without_thought_label", "<|channel>This is a reasoning section<channel|>This is the rest",
        reasoning="This is a reasoning section", content="This is the rest", source=VLLM_R),
    Row("label_lookalike_kept", "<|channel>thousand reasons<channel|>Done", reasoning="thousand reasons", content="Done",
        source=VLLM_R),
    Row("multiline_without_label", "<|channel>This\nThat<channel|>This is the rest\nThat", reasoning="This\nThat",
        content="This is the rest\nThat", source=VLLM_R),
    Row("reasoning_cut_before_close", "<|channel>This is a reasoning section", reasoning="This is a reasoning section",
        source=VLLM_R),
    # content segments are joined with one newline (vLLM keeps both newlines)
    Row("content_around_reasoning", "Before\n<|channel>This is a reasoning section<channel|>\nThis is the rest",
        reasoning="This is a reasoning section", content="Before\nThis is the rest", source=VLLM_R),
    Row("two_reasoning_blocks", "<|channel>first thought<channel|><|channel>second thought<channel|>Final answer.",
        reasoning="first thought\nsecond thought", content="Final answer.", source=OLLAMA),
    Row("stray_close_at_end", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<channel|>", content="Hello, world!\nWhat's up?",
        source=LLAMA_CPP),
    Row("empty_thought_after_answer", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|>",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("repeated_channel_open", "<|channel><|channel>thought\n<channel|>Hello, world!\nWhat's up?",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    # a close with no open: the template did not open reasoning, so the marker is dropped and the
    # text is content (vLLM's streaming answer); with reasoning opened by the prompt it splits
    Row("stray_close_is_dropped", "This is a reasoning section<channel|>This is the rest",
        content="This is a reasoning sectionThis is the rest", source=VLLM_R),
    Row("reasoning_opened_by_prompt", "The user asked for files.<channel|>go.mod and go.sum",
        reasoning="The user asked for files.", content="go.mod and go.sum", thinking_open=True, source=OLLAMA),
    # Ollama drops the reasoning when the request turned thinking off; toolserve returns it as reasoning
    Row("reasoning_kept_when_thinking_off", "<|channel>this is not thinking<channel|>actual content",
        reasoning="this is not thinking", content="actual content", source=OLLAMA),
    Row("thought_then_call", "<|channel>thought\nI need to find files<channel|>" + call("brave_search", f"query:{q('research')}"),
        reasoning="I need to find files", calls=(("brave_search", {"query": "research"}),), source=VLLM_RT),
    Row("thought_then_answer_after_tool", "<|channel>thought\nI need to answer<channel|>The answer is 42",
        reasoning="I need to answer", content="The answer is 42", source=VLLM_RT),
]
