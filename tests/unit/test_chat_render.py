"""The chat renderer: tools and tool history in the template, or injected in the family's style."""

from __future__ import annotations

from toolserve.formats.registry import get_format
from toolserve.formats.template import ChatTemplate, bundled_template_source
from toolserve.serving.chat import ChatOptions, ChatRenderer, OutputShaper
from toolserve.types import ContentDelta, Message, ToolCall, ToolCallArgs, ToolCallStart, ToolSpec

WEATHER = ToolSpec("get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
HISTORY = [
    Message("system", "Be brief."),
    Message("user", "Weather in Paris?"),
    Message("assistant", None, tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
    Message("tool", '{"temp": 21}', tool_call_id="call_1"),
]

# A template that renders tools itself (written for this test): tools as JSON lines, calls as
# <call> with arguments iterated as an object, results in their own role.
TOOL_AWARE = """{%- for m in messages -%}
[{{ m.role }}]{% if m.role == 'system' and tools %}{{ m.content }} TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}
{%- elif m.tool_calls %}{% for c in m.tool_calls %}<call {{ c.function.name }}{% for k, v in c.function.arguments.items() %} {{ k }}={{ v }}{% endfor %}>{% endfor %}
{%- else %}{{ m.content }}{% endif %}
{% endfor -%}
{%- if add_generation_prompt %}[assistant]{% endif -%}"""


def test_template_that_renders_tools_gets_them_with_object_arguments() -> None:
    t = ChatTemplate(TOOL_AWARE)
    assert t.supports_tools
    out = ChatRenderer(t, get_format("hermes")).render(HISTORY, ChatOptions(tools=(WEATHER,)))
    assert out == (
        "[system]Be brief. TOOLS:get_weather;"
        "[user]Weather in Paris?"
        "[assistant]<call get_weather city=Paris>"
        '[tool]{"temp": 21}'
        "[assistant]"
    )


def test_smollm2_style_chatml_gets_hermes_injection() -> None:
    t = ChatTemplate(bundled_template_source("chatml"))
    assert not t.supports_tools
    fmt = get_format("hermes")
    out = ChatRenderer(t, fmt).render(HISTORY, ChatOptions(tools=(WEATHER,)))
    expected = (
        f"<|im_start|>system\nBe brief.\n\n{fmt.render_tools([WEATHER])}<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    assert out == expected


def test_gemma3_gets_tool_code_and_tool_output_in_alternating_turns() -> None:
    t = ChatTemplate(bundled_template_source("gemma3"), bos_token="<bos>")
    fmt = get_format("gemma3_tool_code")
    out = ChatRenderer(t, fmt).render(HISTORY, ChatOptions(tools=(WEATHER,)))
    assert out == (
        f"<bos><start_of_turn>user\nBe brief.\n\n{fmt.render_tools([WEATHER])}\n\nWeather in Paris?<end_of_turn>\n"
        '<start_of_turn>model\n```tool_code\nget_weather(city="Paris")\n```<end_of_turn>\n'
        '<start_of_turn>user\n```tool_output\n{"temp": 21}\n```<end_of_turn>\n'
        "<start_of_turn>model\n"
    )


def test_tool_choice_none_leaves_tool_definitions_out() -> None:
    t = ChatTemplate(bundled_template_source("chatml"))
    out = ChatRenderer(t, get_format("hermes")).render(HISTORY[:2], ChatOptions(tools=(WEATHER,), tool_choice="none"))
    assert "<tools>" not in out


def test_parallel_false_keeps_only_the_first_call() -> None:
    shaper = OutputShaper(get_format("hermes"), ChatOptions(tools=(WEATHER,), parallel_tool_calls=False), thinking_open=False, parse=True)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "X"}}\n</tool_call>\n'
    deltas = shaper.feed(call + call.replace("X", "Y")) + shaper.finish()
    assert [d.index for d in deltas if isinstance(d, ToolCallStart | ToolCallArgs)] == [0] * sum(
        isinstance(d, ToolCallStart | ToolCallArgs) for d in deltas
    )
    assert shaper.calls == 1


def test_no_parser_passes_text_through() -> None:
    shaper = OutputShaper(get_format("hermes"), ChatOptions(), thinking_open=False, parse=False)
    assert shaper.feed("  <tool_call> as text  ") == [ContentDelta("  <tool_call> as text  ")]


THINKING = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}"


def test_reasoning_opened_by_the_template_is_split_out() -> None:
    t = ChatTemplate(THINKING)
    fmt = get_format("hermes")
    renderer = ChatRenderer(t, fmt)
    prompt = renderer.render([Message("user", "hi")], ChatOptions())
    assert renderer.thinking_open(prompt)
    assert not renderer.thinking_open(renderer.render([Message("user", "hi")], ChatOptions(template_kwargs={"enable_thinking": False})))
    from toolserve.serving.chat import needs_parser

    assert needs_parser(fmt, t, ChatOptions())
    for include in (True, False):
        shaper = OutputShaper(fmt, ChatOptions(include_reasoning=include), thinking_open=True, parse=True)
        deltas = shaper.feed("Let me think.</think>Hello!") + shaper.finish()
        text = {type(d).__name__: d.text for d in deltas if hasattr(d, "text")}
        assert text.get("ContentDelta") == "Hello!"
        assert text.get("ReasoningDelta") == ("Let me think." if include else None)


def test_call_inside_unfinished_reasoning_ends_it() -> None:
    shaper = OutputShaper(get_format("hermes"), ChatOptions(tools=(WEATHER,)), thinking_open=True, parse=True)
    deltas = shaper.feed('I should look.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>') + shaper.finish()
    assert shaper.calls == 1
    assert any(type(d).__name__ == "ReasoningDelta" for d in deltas)
