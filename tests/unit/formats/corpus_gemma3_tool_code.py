"""Conformance corpus for the gemma3_tool_code family (Gemma 3, whose template has no tool tokens:
calls in a ```` ```tool_code ```` fence, or a Python list of calls as the whole answer).

No peer ships a parser suite for this format; the rows follow Google's Gemma function-calling
guide, vLLM's Gemma 3 template (served with vLLM's pythonic parser) and what small Gemma 3
models write (formats.md). See corpus_rows.py for the row shape.
"""

from __future__ import annotations

from .corpus_rows import Row

FORMAT_ID = "gemma3_tool_code"
GOOGLE = "Google AI for Developers, Gemma docs: function calling (```tool_code``` / ```tool_output``` blocks)"
VLLM_TEMPLATE = "vLLM examples/tool_chat_template_gemma3_pythonic.jinja (with vLLM's pythonic parser)"
FORMATS_MD = "shared/design/formats.md gemma3_tool_code row (small models: positional and shell style)"
OWN = "toolserve's own row"

PARIS = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {})
FENCE = "```tool_code\n"

ROWS = [
    Row("plain_answer", "The weather is fine.", content="The weather is fine.", source=GOOGLE),
    Row("fence_one_call", FENCE + 'get_weather(city="Paris")\n```', calls=(PARIS,), source=GOOGLE),
    Row("fence_two_lines", FENCE + 'get_weather(city="Paris")\nget_time()\n```', calls=(PARIS, TIME), source=GOOGLE),
    Row("text_around_fence", 'Let me look.\n' + FENCE + 'get_weather(city="Paris")\n```\nDone.', content="Let me look.\nDone.",
        calls=(PARIS,), source=GOOGLE),
    Row("end_of_turn_after_fence", FENCE + 'get_weather(city="Paris")\n```<end_of_turn>', calls=(PARIS,), source=GOOGLE),
    Row("python_literals", FENCE + 'record(s="x", b=True, n=None, a=[1, "z"])\n```',
        calls=(("record", {"s": "x", "b": True, "n": None, "a": [1, "z"]}),), source=GOOGLE),
    Row("positional_values", FENCE + 'get_weather("Paris", "f")\n```', calls=(("get_weather", {"city": "Paris", "unit": "f"}),),
        source=FORMATS_MD),
    Row("positional_typed_by_schema", FENCE + 'record("x", "7", "2.5")\n```', calls=(("record", {"s": "x", "i": 7, "f": 2.5}),),
        source=FORMATS_MD),
    Row("shell_style", FENCE + "get_weather 'New York'\n```", calls=(("get_weather", {"city": "New York"}),), source=FORMATS_MD),
    # the Python-list prompt: the list is the whole answer (vLLM), or inside the fence
    Row("bare_list_whole_answer", '[get_weather(city="Paris"), get_time()]', calls=(PARIS, TIME), source=VLLM_TEMPLATE),
    Row("bare_list_then_end_of_turn", '[get_weather(city="Paris")]<end_of_turn>', calls=(PARIS,), source=VLLM_TEMPLATE),
    Row("list_inside_fence", FENCE + '[get_weather(city="Paris"), get_time()]\n```', calls=(PARIS, TIME), source=GOOGLE),
    # a list after prose, or one that is no call of an offered tool, is the model's text
    Row("list_after_prose_is_text", 'See [get_weather(city="Paris")] above', content='See [get_weather(city="Paris")] above',
        source=OWN),
    Row("list_literal_is_text", "[1, 2, 3] are numbers", content="[1, 2, 3] are numbers", source=OWN),
    Row("python_fence_is_text", "```python\nprint(1)\n```", content="```python\nprint(1)\n```", source=GOOGLE),
    Row("unknown_tool_is_text", FENCE + "nope(a=1)\n```", content=FENCE + "nope(a=1)\n```", source=OWN),
    # cut short: a call starts once its first argument parsed, then keeps what parsed
    Row("cut_after_first_argument", FENCE + 'get_weather(city="Paris", unit="c', calls=(PARIS,), source=OWN),
    Row("cut_inside_first_argument_is_text", FENCE + 'get_weather(city="Pa', content=FENCE + 'get_weather(city="Pa',
        source=OWN),
]
