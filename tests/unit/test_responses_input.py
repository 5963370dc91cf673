"""Responses API requests -> the neutral request: items to messages, tools, choices, formats."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from toolserve.api.responses_input import CUSTOM_SCHEMA, ResponsesRequest, chat_request
from toolserve.errors import InvalidRequest, Unsupported
from toolserve.formats.template import MEDIA_MARKER
from toolserve.types import Message, ToolCall

FN = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def convert(**body: Any) -> Any:
    return chat_request(ResponsesRequest(**body))


def test_items_become_chat_messages() -> None:
    items = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny and rain."}]},
        {"type": "item_reference", "id": "x"},
    ]
    neutral, _, history = convert(input=items, instructions="You are terse.", tools=[FN])
    assert neutral.messages == (
        Message(role="system", content="You are terse."),
        Message(role="developer", content="Be brief."),
        Message(role="user", content="a\nb"),
        Message(role="assistant", content=None, reasoning="think",
                tool_calls=(ToolCall("c1", "get_weather", '{"city": "Paris"}'), ToolCall("c2", "get_weather", '{"city": "Rome"}'))),
        Message(role="tool", content="sunny", tool_call_id="c1"),
        Message(role="tool", content="rain", tool_call_id="c2"),
        Message(role="assistant", content="Sunny and rain."),
    )
    assert history == list(neutral.messages[1:])  # what a continuation keeps: no instructions
    assert neutral.param_names["messages"] == "input" and neutral.param_names["max_tokens"] == "max_output_tokens"


def test_images_are_markers_with_their_place() -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": f"look {MEDIA_MARKER}"},
                                          {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    neutral, _, _ = convert(input=items)
    assert neutral.messages[0].content == "look " + MEDIA_MARKER  # the text's own marker is stripped; the image's is placed
    assert [(i.where, i.url) for i in neutral.images] == [("input[0].content[1]", "data:image/png;base64,AAAA")]
    with pytest.raises(InvalidRequest, match="user messages only"):
        convert(input=[{"role": "assistant", "content": [{"type": "input_image", "image_url": "data:,"}]}])


def test_tools_custom_namespace_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    tools = [FN, {"type": "custom", "name": "apply_patch", "description": "patch"}, {"type": "web_search"},
             {"type": "namespace", "name": "fs", "description": "files", "tools": [{**FN, "name": "read"}]}, {"type": "mcp"}]
    with caplog.at_level(logging.INFO, logger="toolserve.api.responses_input"):
        neutral, names, _ = convert(input="x", tools=tools, tool_choice={"type": "function", "name": "read", "namespace": "fs"})
    assert [t.name for t in neutral.options.tools] == ["get_weather", "apply_patch", "fs__read"]
    assert neutral.options.tools[1].parameters == CUSTOM_SCHEMA
    assert (neutral.options.tool_choice, neutral.options.tool_name) == ("function", "fs__read")
    assert names.origin("fs__read") == ("read", "fs", False) and names.origin("apply_patch") == ("apply_patch", None, True)
    assert "mcp, web_search" in caplog.text  # one line for all that were dropped


@pytest.mark.parametrize(
    ("choice", "want"),
    [(None, ("auto", None)), ("none", ("none", None)), ("required", ("required", None)),
     ({"type": "function", "name": "get_weather"}, ("function", "get_weather")),
     ({"type": "allowed_tools", "mode": "required", "tools": []}, ("required", None))],
)
def test_tool_choice(choice: Any, want: tuple[str, str | None]) -> None:
    neutral, _, _ = convert(input="x", tools=[FN], tool_choice=choice)
    assert (neutral.options.tool_choice, neutral.options.tool_name) == want


@pytest.mark.parametrize(
    ("body", "error", "param"),
    [
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [FN]}, InvalidRequest, "tool_choice"),
        ({"tool_choice": "required"}, InvalidRequest, "tool_choice"),
        ({"text": {"format": {"type": "xml"}}}, InvalidRequest, "text.format"),
        ({"background": True}, Unsupported, "background"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, InvalidRequest, "input[0].call_id"),
        ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, Unsupported, "input[0].content[0]"),
        ({"input": []}, InvalidRequest, "input"),
    ],
)
def test_refusals_name_the_field(body: dict[str, Any], error: type[Exception], param: str) -> None:
    with pytest.raises(error) as exc:
        convert(**{"input": "x", **body})
    assert exc.value.param == param  # type: ignore[attr-defined]


@pytest.mark.parametrize(("effort", "thinking"), [("none", False), ("minimal", False), ("low", True), ("high", True)])
def test_reasoning_effort_is_the_templates_thinking_switch(effort: str, thinking: bool) -> None:
    neutral, _, _ = convert(input="x", reasoning={"effort": effort})
    assert neutral.options.template_kwargs == {"enable_thinking": thinking, "reasoning_effort": effort}
    assert convert(input="x")[0].options.template_kwargs == {}


def test_formats_and_sampling() -> None:
    schema = {"type": "object"}
    neutral, _, _ = convert(input="x", text={"format": {"type": "json_schema", "name": "n", "schema": schema}},
                            max_output_tokens=7, temperature=0.5, top_p=0.9, stop=["END"], seed=3, parallel_tool_calls=False)
    assert neutral.response_schema == ("json_schema", schema) and neutral.max_tokens == 7 and neutral.stops == ("END",)
    assert (neutral.sampling.temperature, neutral.sampling.top_p, neutral.sampling.seed) == (0.5, 0.9, 3)
    assert neutral.options.parallel_tool_calls is False
    assert convert(input="x", text={"format": {"type": "json_object"}})[0].response_schema == ("json_object", None)
