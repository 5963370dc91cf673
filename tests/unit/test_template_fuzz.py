"""Hypothesis fuzzing of the chat renderer: any conversation renders or is refused with a
client error, for every family, through the bundled templates and one that renders tools itself.
Text from a request is data: template syntax inside it is never evaluated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolserve.errors import InvalidRequest
from toolserve.formats.registry import FORMATS
from toolserve.formats.template import ChatTemplate, bundled_template_source
from toolserve.serving.chat import ChatOptions, ChatRenderer
from toolserve.types import Message, ToolCall, ToolSpec

TOOL_AWARE = """{%- for m in messages -%}
[{{ m.role }}]{% if m.tool_calls %}{% for c in m.tool_calls %}<call {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}
{%- else %}{{ m.content }}{% endif %}
{% endfor -%}
{%- if tools %}TOOLS:{{ tools | tojson }}{% endif -%}
{%- if add_generation_prompt %}[assistant]{% endif -%}"""

TEMPLATES = {
    "chatml": ChatTemplate(bundled_template_source("chatml"), bos_token="<|im_start|>", eos_token="<|im_end|>"),
    "gemma3": ChatTemplate(bundled_template_source("gemma3"), bos_token="<bos>", eos_token="<eos>"),
    "tool_aware": ChatTemplate(TOOL_AWARE),
}

# text that looks like template syntax, family markers or broken JSON, mixed with any unicode
tricky = st.sampled_from(
    ["{{ 7 * 7 }}", "{% for x in range(9) %}x{% endfor %}", "{{ ''.__class__ }}", "<tool_call>", "</tool_call>",
     "```tool_code", "[TOOL_CALLS]", "<|im_end|>", "<end_of_turn>", '{"name": ', "\\u0000", "\x00", "}"]
)
text = st.lists(st.one_of(st.text(max_size=20), tricky), max_size=4).map("".join)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
arguments = st.one_of(st.dictionaries(names, json_values, max_size=3).map(json.dumps), text)  # valid JSON or not
calls = st.lists(st.builds(ToolCall, id=names, name=names, arguments=arguments), min_size=1, max_size=2).map(tuple)
message = st.one_of(
    st.builds(Message, role=st.sampled_from(["system", "developer", "user"]), content=text),
    st.builds(Message, role=st.just("assistant"), content=st.none() | text, tool_calls=st.just(()) | calls),
    st.builds(Message, role=st.just("tool"), content=text, tool_call_id=st.none() | names),
)
schemas = st.one_of(
    st.just({}),
    st.dictionaries(names, st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "array"}, {}]), max_size=3).map(
        lambda props: {"type": "object", "properties": props, "required": sorted(props)[:1]}
    ),
)
tools = st.lists(st.builds(ToolSpec, name=names, description=text, parameters=schemas), max_size=3, unique_by=lambda t: t.name)
options = st.builds(
    ChatOptions,
    tools=tools.map(tuple),
    tool_choice=st.sampled_from(["auto", "none", "required"]),
    parallel_tool_calls=st.booleans(),
    template_kwargs=st.dictionaries(st.sampled_from(["enable_thinking", "x"]), st.booleans() | st.text(max_size=4), max_size=2),
)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("family", sorted(FORMATS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(message, min_size=1, max_size=6), opts=options)
def test_any_conversation_renders_or_is_a_client_error(family: str, template: str, messages: list[Message], opts: Any) -> None:
    renderer = ChatRenderer(TEMPLATES[template], FORMATS[family])
    try:
        prompt = renderer.render(messages, opts)
    except InvalidRequest:  # a 400 (TemplateError is one): the conversation is refused, clearly
        return
    assert isinstance(prompt, str)
    for m in messages:
        if m.role == "user" and m.content and m.content.strip():
            assert m.content.strip() in prompt  # verbatim: nothing in it was evaluated
