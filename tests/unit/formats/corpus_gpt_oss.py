"""Conformance corpus for gpt-oss (Harmony): the `to=functions.NAME` recipient after the channel,
in the role header, or leading the output (the template wrote `<|start|>assistant`), with and
without `<|constrain|>json`; analysis, commentary and final channels.

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "gpt_oss"
VLLM = "vLLM tests/tool_parsers/test_openai_tool_parser.py"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (openai-gpt-oss-120b template)"
FORMATS_MD = "shared/design/formats.md gpt_oss row"
OWN = "toolserve's own row"

THINK = "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
CALL = '{"city": "Paris"}'
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})
HELLO = "Hello, world!\nWhat's up?"

ROWS = [
    # -- recipient after the channel name
    Row("recipient_after_channel_constrain", THINK + "<|start|>assistant<|channel|>commentary to=functions.get_weather "
        f"<|constrain|>json<|message|>{CALL}<|call|>", reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("recipient_after_channel_no_call_token", THINK + "<|start|>assistant<|channel|>commentary to=functions.get_weather "
        f"<|constrain|>json<|message|>{CALL}", reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("recipient_no_constrain", THINK + "<|start|>assistant<|channel|>commentary to=functions.get_weather"
        f"<|message|>{CALL}<|call|>", reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("constrain_without_space", "<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json"
        f"<|message|>{CALL}<|call|>", calls=(PARIS,), source=VLLM),
    Row("recipient_on_analysis_channel", THINK + "<|start|>assistant<|channel|>analysis to=functions.get_weather "
        f"<|constrain|>json<|message|>{CALL}", reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("arguments_with_newlines", "<|channel|>analysis<|message|>We need to use get_weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{\n"city": "Paris"\n}<|call|>', reasoning="We need to use get_weather.", calls=(PARIS,), source=VLLM),
    # -- recipient in the role header
    Row("recipient_in_role_header", THINK + "<|start|>assistant to=functions.get_weather<|channel|>analysis "
        f"<|constrain|>json<|message|>{CALL}", reasoning="I'm\nthinking", calls=(PARIS,), source=LLAMA_CPP),
    Row("recipient_in_role_header_commentary", "<|start|>assistant to=functions.get_weather<|channel|>commentary "
        f"<|constrain|>json<|message|>{CALL}<|call|>", calls=(PARIS,), source=FORMATS_MD),
    # the template wrote `<|start|>assistant`: the output starts with the rest of the role header
    Row("recipient_leads_output_commentary", f" to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{CALL}",
        calls=(PARIS,), source=LLAMA_CPP),
    Row("recipient_leads_output_analysis", f" to=functions.get_weather<|channel|>analysis <|constrain|>json<|message|>{CALL}",
        calls=(PARIS,), source=LLAMA_CPP),
    Row("recipient_leads_output_after_reasoning", THINK + "<|start|>assistant"
        " to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{}<|call|>",
        reasoning="I'm\nthinking", calls=(TIME,), source=LLAMA_CPP),
    # -- several calls, empty arguments
    Row("several_calls", "<|channel|>analysis<|message|>Need both.<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{CALL}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>",
        reasoning="Need both.", calls=(PARIS, TIME), source=VLLM),
    Row("empty_object_arguments", "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
        "<|message|>{}<|call|>", calls=(TIME,), source=VLLM),
    # an empty message to a function: vLLM returns arguments ""; toolserve's arguments are an object
    Row("empty_message_arguments", "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
        "<|message|><|call|>", calls=(TIME,), source=VLLM),
    # -- content channels
    Row("final_after_reasoning", THINK + f"<|start|>assistant<|channel|>final<|message|>{HELLO}",
        reasoning="I'm\nthinking", content=HELLO, source=LLAMA_CPP),
    Row("final_only", "<|channel|>final<|message|>This is a test<|return|>", content="This is a test", source=VLLM),
    Row("commentary_preamble", THINK + f"<|start|>assistant<|channel|>commentary<|message|>{HELLO}",
        reasoning="I'm\nthinking", content=HELLO, source=LLAMA_CPP),
    Row("commentary_preamble_then_call", THINK + f"<|start|>assistant<|channel|>commentary<|message|>{HELLO}<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{CALL}",
        reasoning="I'm\nthinking", content=HELLO, calls=(PARIS,), source=LLAMA_CPP),
    # after a call the role header comes again: its channel is what follows `<|channel|>`, not the
    # role (read as the channel, it put a second analysis block into the content)
    Row("analysis_after_a_call", f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{CALL}<|call|>"
        "<|start|>assistant<|channel|>analysis<|message|>Now Rome.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.<|return|>",
        reasoning="Now Rome.", content="Done.", calls=(PARIS,), source=OWN),
    Row("call_then_final", "<|channel|>analysis<|message|>Use the tool.<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{CALL}<|call|>"
        "<|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|return|>",
        reasoning="Use the tool.", content="This tool call will get the weather.", calls=(PARIS,), source=VLLM),
    Row("analysis_cut", "<|channel|>analysis<|message|>I'm\nthink", reasoning="I'm\nthink", source=LLAMA_CPP),
    Row("analysis_closed", "<|channel|>analysis<|message|>I'm\nthinking<|end|>", reasoning="I'm\nthinking",
        source=LLAMA_CPP),
    # -- not calls
    # prose that merely says `to=functions.x` has no Harmony header after it: content
    Row("recipient_words_in_prose", "Send it to=functions.get_time later.", content="Send it to=functions.get_time later.",
        source=FORMATS_MD),
    Row("recipient_words_leading_prose", "to=functions.get_time is how a call is addressed.\nThat is all.",
        content="to=functions.get_time is how a call is addressed.\nThat is all.", source=FORMATS_MD),
]
