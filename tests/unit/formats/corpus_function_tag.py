"""Conformance corpus for the function_tag family (Llama 3.1 function-tag prompt, Functionary v3.1:
`<function=n>{...}</function>`).

See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "function_tag"
LLAMA_CPP = "llama.cpp tests/test-chat.cpp (meetkai-functionary-medium-v3.1)"
LLAMA_CPP_HERMES = "llama.cpp tests/test-chat.cpp (Hermes 2 Pro parser's <function> spellings)"
OWN = "toolserve's own row"

W = '{"city": "Paris"}'
PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})

ROWS = [
    Row("plain_answer", "Hello, world!\nWhat's up?", content="Hello, world!\nWhat's up?", source=LLAMA_CPP),
    Row("one_call", f"<function=get_weather>{W}</function>", calls=(PARIS,), source=LLAMA_CPP),
    # cut inside the close tag: the part of `</function>` written is dropped (llama.cpp's partial parse)
    Row("close_tag_cut_short", f"<function=get_weather>{W}<", calls=(PARIS,), source=LLAMA_CPP),
    Row("end_of_message_after_call", f"<function=get_weather>{W}</function><|eom_id|>", calls=(PARIS,), source=LLAMA_CPP),
    Row("two_calls_on_lines", f"<function=get_weather>{W}</function>\n<function=get_time>{{}}</function>",
        calls=(PARIS, TIME), source=LLAMA_CPP_HERMES),
    Row("name_attribute_spelling", f'<function name="get_weather">\n{W}\n</function>', calls=(PARIS,), source=LLAMA_CPP_HERMES),
    Row("name_attribute_single_quotes", f"<function name='get_weather'>{W}</function>", calls=(PARIS,), source=OWN),
    Row("text_before_call", f"Sure.<function=get_weather>{W}</function>", content="Sure.", calls=(PARIS,), source=OWN),
    Row("text_after_call", f"<function=get_weather>{W}</function>\nDone.", content="Done.", calls=(PARIS,), source=OWN),
    Row("spaces_around_object", f"<function=get_weather> {W} </function>", calls=(PARIS,), source=OWN),
    Row("arguments_as_json_string", '<function=get_weather>"{\\"city\\": \\"Paris\\"}"</function>', calls=(PARIS,),
        source=OWN),
    Row("cut_inside_arguments", '<function=get_weather>{"city": "Pa', calls=(("get_weather", {"city": "Pa"}),), source=OWN),
    Row("tag_in_prose_is_text", "Write <function=name> tags.", content="Write <function=name> tags.", source=OWN),
    Row("unknown_tool_is_text", "<function=nope>{}</function>", content="<function=nope>{}</function>", source=OWN),
]
