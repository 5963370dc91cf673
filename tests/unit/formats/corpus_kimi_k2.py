"""Conformance corpus for the kimi_k2 family: Kimi K2 Instruct (and its 0905 update, same wire
format), K2-Thinking / K2.5 with `<think>` reasoning, call ids `functions.«n»:«idx»` kept as the
call's id.

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "kimi_k2"
VLLM = "vLLM tests/tool_parsers/test_kimi_k2_tool_parser.py"
VLLM_R = "vLLM tests/reasoning/test_kimi_k2_reasoning_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (moonshotai-Kimi-K2, Kimi-K2-Instruct templates)"
TEMPLATE_THINKING = "llama.cpp models/templates/Kimi-K2-Thinking.jinja (tool-call and thinking layout)"
SGLANG = "SGLang test/srt function-call tests (KimiK2Detector)"
OWN = "toolserve's own row"

SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
TB, AB, TE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def call(call_id: str, args: str, space: str = "") -> str:
    """One call; vLLM's suite writes a space after the id, the templates none."""
    return f"{TB}{call_id}{space}{AB}{args}{TE}"


def section(*calls: str) -> str:
    return SB + "".join(calls) + SE


def W(city: str, idx: int = 0, prefix: str = "functions.") -> tuple[str, dict[str, str], str]:
    return ("get_weather", {"city": city}, f"{prefix}get_weather:{idx}")


ROWS = [
    Row("no_call", "This is a test", content="This is a test", source=VLLM),
    Row("template_layout", section(call("functions.get_weather:0", '{"city": "Paris"}')), calls=(W("Paris"),),
        source=LLAMA_CPP),
    Row("text_before_space_after_id", "I'll check. " + section(call("functions.get_weather:0", '{"city": "Beijing"}', " ")),
        content="I'll check.", calls=(W("Beijing"),), source=VLLM),
    Row("parallel_same_tool", "Compare weather. " + section(call("functions.get_weather:0", '{"city": "Beijing"}', " "),
                                                            call("functions.get_weather:1", '{"city": "Shanghai"}', " ")),
        content="Compare weather.", calls=(W("Beijing"), W("Shanghai", 1)), source=VLLM),
    Row("three_tools", "Multiple tasks. " + section(call("functions.get_weather:0", '{"city": "New York"}', " "),
                                                    call("functions.brave_search:1", '{"query": "technology"}', " "),
                                                    call("functions.get_time:2", "{}", " ")),
        content="Multiple tasks.", calls=(W("New York"), ("brave_search", {"query": "technology"}, "functions.brave_search:1"),
                                          ("get_time", {}, "functions.get_time:2")), source=VLLM),
    Row("angle_brackets_in_json", section(call("functions.record:0", '{"s": "<div>content</div>"}', " ")),
        calls=(("record", {"s": "<div>content</div>"}, "functions.record:0"),), source=VLLM),
    Row("multiline_json", "Formatted. " + section(call("functions.record:0", '{\n  "s": "test",\n  "i": 123\n}', " ")),
        content="Formatted.", calls=(("record", {"s": "test", "i": 123}, "functions.record:0"),), source=VLLM),
    # the index counts calls over the whole conversation: a later turn starts past 0 (SGLang)
    Row("conversation_wide_index", "Let me check." + section(call("functions.get_weather:5", '{"city": "Paris"}'),
                                                             call("functions.get_time:6", "{}")),
        content="Let me check.", calls=(W("Paris", 5), ("get_time", {}, "functions.get_time:6")), source=SGLANG),
    Row("id_without_functions_prefix", "No prefix. " + section(call("get_weather:0", '{"city": "Tokyo"}', " ")),
        content="No prefix.", calls=(W("Tokyo", 0, ""),), source=VLLM),
    Row("empty_arguments", "Empty args. " + section(call("functions.get_time:0", "{}", " ")), content="Empty args.",
        calls=(("get_time", {}, "functions.get_time:0"),), source=VLLM),
    Row("spaces_around_every_part", f"{SB} {TB} functions.get_time:0 {AB} {{}} {TE} {SE}",
        calls=(("get_time", {}, "functions.get_time:0"),), source=OWN),
    # vLLM returns the broken arguments as they are; toolserve closes what the model opened
    Row("broken_json_then_good_call", section(call("functions.get_weather:0", '{"city": "Beijing"', " "),
                                              call("functions.get_time:1", "{}", " ")),
        calls=(W("Beijing"), ("get_time", {}, "functions.get_time:1")), source=VLLM),
    # an id with no `:idx` is no call; vLLM drops it, toolserve keeps the text the model wrote
    Row("id_without_index_is_text", section(call("functions.get_weather.0", '{"city": "B"}', " "),
                                            call("functions.get_time:1", "{}", " ")),
        content=call("functions.get_weather.0", '{"city": "B"}', " "), calls=(("get_time", {}, "functions.get_time:1"),),
        source=VLLM),
    # a bare counter names no tool: vLLM guesses the tool (the only one offered, or the one whose
    # parameters fit the arguments); toolserve does not pick a name the model did not write
    Row("bare_counter_is_text", "Let me check. " + section(call("0", '{"city": "Tokyo"}', " ")),
        content="Let me check. " + call("0", '{"city": "Tokyo"}', " "), source=VLLM),
    Row("empty_section", "Reasoning. " + SB + SE, content="Reasoning.", source=VLLM),
    Row("newline_between_section_markers", "Checking." + SB + "\n" + call("functions.get_time:0", "{}") + "\n" + SE,
        content="Checking.", calls=(("get_time", {}, "functions.get_time:0"),), source=VLLM),
    # vLLM drops text after the section; toolserve keeps the model's text
    Row("text_after_section", "Before. " + section(call("functions.get_time:0", "{} ", " ")) + " After tools.",
        content="Before.\nAfter tools.", calls=(("get_time", {}, "functions.get_time:0"),), source=VLLM),
    Row("cut_inside_arguments", "I'll check. " + SB + TB + "functions.get_weather:0 " + AB + '{"city": "Bei',
        content="I'll check.", calls=(W("Bei"),), source=VLLM),
    Row("im_end_after_answer", "Hello!<|im_end|>", content="Hello!", source=TEMPLATE_THINKING),
    # K2-Thinking / K2.5: <think> reasoning; the tool section also ends it
    Row("think_then_answer", "<think>step by step reasoning</think>final answer", reasoning="step by step reasoning",
        content="final answer", source=VLLM_R),
    Row("empty_think", "<think></think>final answer", content="final answer", source=VLLM_R),
    Row("section_ends_reasoning", "<think>some reasoning" + section(call("functions.get_time:0", "{}")),
        reasoning="some reasoning", calls=(("get_time", {}, "functions.get_time:0"),), source=VLLM_R),
    Row("think_then_calls", "<think>Need two cities.</think>" + section(call("functions.get_weather:0", '{"city": "Paris"}'),
                                                                        call("functions.get_weather:1", '{"city": "Oslo"}')),
        reasoning="Need two cities.", calls=(W("Paris"), W("Oslo", 1)), source=TEMPLATE_THINKING),
    # vLLM reads text with no <think> as reasoning; toolserve does when the prompt ended with <think>
    Row("reasoning_opened_by_template", "implicit reasoning</think>answer", reasoning="implicit reasoning",
        content="answer", thinking_open=True, source=VLLM_R),
    Row("no_think_tag_without_open_prompt_is_content", "implicit reasoning with no tags",
        content="implicit reasoning with no tags", source=VLLM_R),
    Row("unterminated_reasoning", "<think>still thinking", reasoning="still thinking", source=VLLM_R),
]
