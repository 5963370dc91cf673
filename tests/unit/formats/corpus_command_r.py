"""Conformance corpus for the command_r family (Command R7B, Command A and Command A Reasoning:
`<|START_ACTION|>[{"tool_call_id": …, "tool_name": …, "parameters": {…}}]<|END_ACTION|>`, reasoning
in `<|START_THINKING|>…<|END_THINKING|>`, the answer in `<|START_RESPONSE|>` or `<|START_TEXT|>`).

The model's `tool_call_id` ("0", "1") restarts every turn, so toolserve gives each call its own
id (vLLM returns the model's). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "command_r"
VLLM = "vLLM tests/tool_parsers/test_cohere_command_tool_parser.py"
VLLM_R = "vLLM tests/reasoning/test_cohere_command_reasoning_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (CohereForAI-c4ai-command-r7b-12-2024-tool_use)"
OLLAMA = "Ollama model/parsers/cohere_test.go"
OWN = "toolserve's own row"

SA, EA = "<|START_ACTION|>", "<|END_ACTION|>"
ST, ET = "<|START_THINKING|>", "<|END_THINKING|>"
W = '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}'
T = '{"tool_call_id": "1", "tool_name": "get_time", "parameters": {}}'
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})


def action(*items: str, layout: bool = True) -> str:
    """The template's layout: the list on its own lines, one call per line."""
    if layout:
        return SA + "\n[\n    " + ",\n    ".join(items) + "\n]\n" + EA
    return SA + "[" + ", ".join(items) + "]" + EA


ROWS = [
    Row("plain_answer", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("response_markers", "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
        content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("thinking_then_response", f"{ST}I'm\nthinking{ET}<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
        reasoning="I'm\nthinking", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("thinking_then_action", f"{ST}I'm\nthinking{ET}" + action(W), reasoning="I'm\nthinking", calls=(PARIS,),
        source=LLAMA_CPP),
    Row("empty_thinking_then_action", f"{ST}{ET}" + action(W), calls=(PARIS,), source=LLAMA_CPP),
    Row("space_after_thinking_marker", f"{ST} i will call get_weather{ET}" + action(W),
        reasoning="i will call get_weather", calls=(PARIS,), source=VLLM),
    Row("two_calls_on_lines", f"{ST}first I think about the weather{ET}" + action(W, T),
        reasoning="first I think about the weather", calls=(PARIS, TIME), source=VLLM),
    Row("reasoning_only", f"{ST}just think, no response{ET}", reasoning="just think, no response", source=VLLM),
    Row("action_tight", action(W, T, layout=False), calls=(PARIS, TIME), source=OLLAMA),
    Row("integer_argument", action('{"tool_call_id": "0", "tool_name": "record", "parameters": {"s": "x", "i": 42}}'),
        calls=(("record", {"s": "x", "i": 42}),), source=VLLM_R),
    # Command A's newer templates answer in <|START_TEXT|> … <|END_TEXT|>
    Row("text_markers_after_thinking", f"Let me think about this.{ET}<|START_TEXT|>Hello world!<|END_TEXT|>",
        reasoning="Let me think about this.", content="Hello world!", thinking_open=True, source=OLLAMA),
    Row("text_markers_reasoning_off", "<|START_TEXT|>direct answer<|END_TEXT|>", content="direct answer", source=OLLAMA),
    Row("text_markers_then_end_of_turn", f"t{ET}<|START_TEXT|>hi<|END_TEXT|><|END_OF_TURN_TOKEN|>", reasoning="t",
        content="hi", thinking_open=True, source=OLLAMA),
    Row("end_of_turn_without_end_text", f"t{ET}<|START_TEXT|>answer<|END_OF_TURN_TOKEN|>", reasoning="t",
        content="answer", thinking_open=True, source=OLLAMA),
    Row("legacy_response_markers_after_open_thinking", f"plan{ET}<|START_RESPONSE|>Hello there<|END_RESPONSE|>",
        reasoning="plan", content="Hello there", thinking_open=True, source=OLLAMA),
    Row("bare_content_after_open_thinking", f"thought{ET}Just plain text output", reasoning="thought",
        content="Just plain text output", thinking_open=True, source=OLLAMA),
    Row("bare_content_before_end_of_turn", f"t{ET}plain answer<|END_OF_TURN_TOKEN|>", reasoning="t",
        content="plain answer", thinking_open=True, source=OLLAMA),
    Row("open_thinking_then_action", f"plan{ET}{SA}[\n{W},\n{T}\n]{EA}", reasoning="plan", calls=(PARIS, TIME),
        thinking_open=True, source=OLLAMA),
    # a comma left out between two calls: both are read (the list is inside a special-token block)
    Row("missing_comma_between_calls", f"{ET}{SA}[{W}{T}]{EA}", calls=(PARIS, TIME), thinking_open=True, source=OLLAMA),
    Row("braces_inside_a_string", action('{"tool_call_id": "0", "tool_name": "record", "parameters": {"s": "{not json}"}}',
                                         layout=False),
        calls=(("record", {"s": "{not json}"}),), source=OLLAMA),
    # Ollama drops the broken call and keeps its well-formed sibling; toolserve has announced the
    # first call when its arguments opened, keeps what parsed of it (`15` of `15:30`) and drops the
    # rest of the block up to <|END_ACTION|>, as for every JSON-list family
    Row("malformed_value_keeps_what_parsed",
        action('{"tool_call_id": "0", "tool_name": "record", "parameters": {"s": 15:30}}',
               '{"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Oslo"}}', layout=False),
        calls=(("record", {"s": 15}),), source=OLLAMA),
    # garbage in the action block: no call; toolserve keeps the text (Ollama drops it)
    Row("garbage_action_is_text", f"x{ET}{SA}[!!!]{EA}", reasoning="x", content=f"{SA}[!!!]{EA}", thinking_open=True,
        source=OLLAMA),
    # cut before the arguments opened: no call, the text stays (llama.cpp shows a partial call
    # while streaming); cut inside them: the call keeps what parsed
    Row("cut_before_arguments_is_text", f"{ST}I'm\nthinking{ET}{SA}[\n    " + '{"tool_call_id": "0", "tool_name": "get_weather", ',
        reasoning="I'm\nthinking", content=f"{SA}[\n    " + '{"tool_call_id": "0", "tool_name": "get_weather",',
        source=LLAMA_CPP),
    Row("cut_inside_arguments", f"{ST}I'm\nthinking{ET}{SA}[\n    " + '{"tool_call_id": "0", "tool_name": "get_weather", '
        '"parameters": {"city": "Pa', reasoning="I'm\nthinking", calls=(("get_weather", {"city": "Pa"}),), source=LLAMA_CPP),
    # Command A's citations: vLLM moves the `<co>` … `</co: …>` spans into citation objects;
    # toolserve has no citation field: the markup goes, the cited text stays
    Row("citation_markup_dropped", f"{ST}This is a rainbow <co>emoji: 🌈</co: 0:[1]>{ET}\n"
        "<|START_RESPONSE|>foo <co>bar</co: 0:[1,2],1:[3,4]><|END_RESPONSE|>",
        reasoning="This is a rainbow emoji: 🌈", content="foo bar", source=VLLM),
    Row("unknown_tool_is_text", action('{"tool_call_id": "0", "tool_name": "nope", "parameters": {}}', layout=False),
        content=action('{"tool_call_id": "0", "tool_name": "nope", "parameters": {}}', layout=False), source=OWN),
    Row("action_marker_named_in_reasoning", f"{ST}I could write {SA} here.{ET}<|START_RESPONSE|>No call.<|END_RESPONSE|>",
        reasoning=f"I could write {SA} here.", content="No call.", source=OWN),
]
