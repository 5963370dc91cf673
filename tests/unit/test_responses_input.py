"""Responses API requests -> the neutral request: items to messages, tools, choices, formats."""

from __future__ import annotations

import logging
from typing import Any

import pydantic
import pytest
from fastapi.exceptions import RequestValidationError

from toolserve.api.errors import _validation_response
from toolserve.api.responses.input import CUSTOM_SCHEMA, ResponsesRequest, chat_request
from toolserve.errors import InvalidRequest, ToolserveError, Unsupported
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
             {"type": "namespace", "name": "fs", "description": "files", "tools": [{**FN, "name": "read"}]},
             {"type": "image_generation"}]
    with caplog.at_level(logging.INFO, logger="toolserve.api.responses.input"):
        neutral, names, _ = convert(input="x", tools=tools, tool_choice={"type": "function", "name": "read", "namespace": "fs"})
    assert [t.name for t in neutral.options.tools] == ["get_weather", "apply_patch", "fs__read"]
    assert neutral.options.tools[1].parameters == CUSTOM_SCHEMA
    assert (neutral.options.tool_choice, neutral.options.tool_name) == ("function", "fs__read")
    assert names.origin("fs__read") == ("read", "fs", False) and names.origin("apply_patch") == ("apply_patch", None, True)
    assert "image_generation, web_search" in caplog.text  # one line for all that were dropped


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


def refusal(body: dict[str, Any], history: tuple[Message, ...] = ()) -> tuple[int, str | None, str]:
    """(status, param, message) of the error a request gets: from the model's validation, as
    the app's handler renders it, or from the conversion."""
    try:
        req = ResponsesRequest(**{"input": "x", **body})
    except pydantic.ValidationError as exc:
        error, status = _validation_response(RequestValidationError(exc.errors()))
        return status, error["error"]["param"], error["error"]["message"]
    with pytest.raises(ToolserveError) as exc:
        chat_request(req, history)
    return exc.value.status, exc.value.param, exc.value.message


def _user(*parts: Any) -> list[Any]:
    return [{"type": "message", "role": "user", "content": list(parts)}]


CALL = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
NS = {"type": "namespace", "name": "fs", "description": "files", "tools": [{**FN, "name": "read"}]}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        # input items and their parts
        ({"input": 5}, "input"),
        ({"input": {"role": "user"}}, "input"),
        ({"input": [5]}, "input[0]"),
        ({"input": ["hi"]}, "input[0]"),
        ({"input": [{"type": {"a": 1}}]}, "input[0].type"),
        ({"input": [{"type": ["message"]}]}, "input[0].type"),
        ({"input": [{"type": None, "role": "user", "content": "x"}]}, "input[0].type"),
        ({"input": [{"role": ["user"], "content": "x"}]}, "input[0].role"),
        ({"input": [{"content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": None}]}, "input[0].content"),
        ({"input": _user(5)}, "input[0].content[0]"),
        ({"input": _user("hi")}, "input[0].content[0]"),
        ({"input": _user({"type": "input_text", "text": 5})}, "input[0].content[0].text"),
        ({"input": _user({"type": "input_text"})}, "input[0].content[0].text"),
        ({"input": _user({"type": {"x": 1}, "text": "a"})}, "input[0].content[0].type"),
        ({"input": _user({"type": "input_image", "image_url": 5})}, "input[0].content[0].image_url"),
        ({"input": [{"role": "assistant", "content": [{"type": "refusal", "refusal": 5}]}]}, "input[0].content[0].refusal"),
        ({"input": [{"type": "reasoning", "summary": 5}]}, "input[0].summary"),
        ({"input": [{"type": "reasoning", "summary": [], "content": 5}]}, "input[0].content"),
        ({"input": [{"type": "reasoning", "summary": [5]}]}, "input[0].summary[0]"),
        ({"input": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": 5}]}]}, "input[0].summary[0].text"),
        ({"input": [{"type": "reasoning", "summary": [{"type": "reasoning_text", "text": "x"}]}]}, "input[0].summary[0].type"),
        ({"input": [{**CALL, "arguments": [1]}]}, "input[0].arguments"),
        ({"input": [{**CALL, "call_id": {"a": 1}}]}, "input[0].call_id"),
        ({"input": [{**CALL, "name": 5}]}, "input[0].name"),
        ({"input": [{**CALL, "namespace": 5}]}, "input[0].namespace"),
        ({"input": [{"type": "custom_tool_call", "call_id": "c1", "name": "f", "input": 5}]}, "input[0].input"),
        ({"input": [CALL, {"type": "function_call_output", "call_id": "c1", "output": 5}]}, "input[1].output"),
        ({"input": [CALL, {"type": "function_call_output", "call_id": "c1", "output": [7]}]}, "input[1].output[0]"),
        ({"input": [CALL, {"type": "function_call_output", "call_id": 1, "output": "x"}]}, "input[1].call_id"),
        # tools
        ({"tools": 5}, "tools"),
        ({"tools": [5]}, "tools[0]"),
        ({"tools": [{"name": "f"}]}, "tools[0].type"),
        ({"tools": [{"type": {"a": 1}}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "name": ""}]}, "tools[0].name"),
        ({"tools": [{**FN, "parameters": [1]}]}, "tools[0].parameters"),
        ({"tools": [{**FN, "strict": "maybe"}]}, "tools[0].strict"),
        ({"tools": [{**FN, "description": 5}]}, "tools[0].description"),
        ({"tools": [{"type": "custom", "name": 5}]}, "tools[0].name"),
        ({"tools": [{"type": "namespace", "name": "fs", "tools": 5}]}, "tools[0].tools"),
        ({"tools": [{"type": "namespace", "name": "fs", "tools": [{"name": 5}]}]}, "tools[0].tools[0].name"),
        ({"tools": [{"type": "namespace", "name": 5, "tools": []}]}, "tools[0].name"),
        # tool_choice, text, reasoning and the rest
        ({"tool_choice": 5, "tools": [FN]}, "tool_choice"),
        ({"tool_choice": "bogus", "tools": [FN]}, "tool_choice"),
        ({"tool_choice": {"type": 5}, "tools": [FN]}, "tool_choice.type"),
        ({"tool_choice": {"type": "function"}, "tools": [FN]}, "tool_choice.name"),
        ({"tool_choice": {"type": "function", "name": 5}, "tools": [FN]}, "tool_choice.name"),
        ({"tool_choice": {"type": "function", "name": "read", "namespace": 5}, "tools": [NS]}, "tool_choice.namespace"),
        ({"tool_choice": {"type": "function", "name": "get_weather", "namespace": ""}, "tools": [FN]}, "tool_choice.namespace"),
        ({"tool_choice": {"type": "allowed_tools", "mode": 5, "tools": []}, "tools": [FN]}, "tool_choice.mode"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": 5}, "tools": [FN]}, "tool_choice.tools"),
        ({"text": 5}, "text"),
        ({"text": {"format": 5}}, "text.format"),
        ({"text": {"format": {"type": 5}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "schema": 5}}}, "text.format.schema"),
        ({"text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
        ({"text": {"format": {"type": "json_schema", "schema": {}, "strict": "very"}}}, "text.format.strict"),
        ({"reasoning": 5}, "reasoning"),
        ({"reasoning": {"effort": 5}}, "reasoning.effort"),
        ({"reasoning": {"effort": "low", "summary": ["auto"]}}, "reasoning.summary"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"metadata": {"k": 1}}, "metadata.k"),
        ({"stop": [1]}, "stop"),
        ({"logit_bias": {"1": 1000}}, "logit_bias"),
    ],
)
def test_wrong_types_are_400s_naming_their_path(body: dict[str, Any], param: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        ResponsesRequest(**{"input": "x", **body})
    status, got, message = refusal(body)
    assert (status, got) == (400, param), message
    assert param in message


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id",
         "No tool call found for function call output with call_id nope."),
        ({"input": [{"type": "custom_tool_call_output", "call_id": "nope", "output": "x"}]}, "input[0].call_id",
         "No tool call found for custom tool call output with call_id nope."),
        ({"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}, CALL]}, "input[0].call_id", "c1"),
        ({"input": [CALL, {"type": "function_call_output", "call_id": "c2", "output": "x"}]}, "input[1].call_id", "c2"),
        ({"tools": [FN, {"type": "namespace", "name": "fs", "tools": []}],
          "tool_choice": {"type": "function", "name": "get_weather", "namespace": "fs"}}, "tool_choice", "namespace 'fs'"),
        ({"tools": [FN], "tool_choice": {"type": "function", "name": "read", "namespace": "fs"}}, "tool_choice", "namespace 'fs'"),
        ({"tools": [NS], "tool_choice": {"type": "function", "name": "write", "namespace": "fs"}}, "tool_choice", "'fs__write'"),
        ({"tools": [NS], "tool_choice": {"type": "custom", "name": "read"}}, "tool_choice", "'read'"),
        ({"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": []}}, "tool_choice", "at least one tool"),
        ({"tools": [FN], "tool_choice": {"type": "web_search_preview"}}, "tool_choice", "web_search_preview"),
        ({"input": [{"type": "frobnicate"}]}, "input[0].type", "'frobnicate'"),
        ({"input": _user({"type": "input_file", "file_id": "f"})}, "input[0].content[0]", "'input_file'"),
        ({"text": {"format": {"type": "xml"}}}, "text.format", "'xml'"),
    ],
)
def test_references_must_name_what_exists(body: dict[str, Any], param: str, says: str) -> None:
    ResponsesRequest(**{"input": "x", **body})  # well typed: refused by the conversion
    status, got, message = refusal(body)
    assert (status, got) == (400, param) and says in message, message


def test_outputs_answer_calls_of_the_stored_history() -> None:
    history = (Message(role="user", content="hi"), Message(role="assistant", content=None, tool_calls=(ToolCall("c7", "get_weather", "{}"),)))
    answer = [{"type": "function_call_output", "call_id": "c7", "output": "sunny"}]
    neutral, _, _ = chat_request(ResponsesRequest(input=answer), history)
    assert neutral.messages[-1] == Message(role="tool", content="sunny", tool_call_id="c7")
    assert refusal({"input": [{**answer[0], "call_id": "c8"}]}, history)[1] == "input[0].call_id"
    # an item_reference may stand for a call stored upstream, which this server cannot see
    referenced = [{"type": "item_reference", "id": "fc_1"}, {"type": "custom_tool_call_output", "call_id": "c9", "output": "x"}]
    assert convert(input=referenced)[0].messages[-1].tool_call_id == "c9"


def test_skipped_items_and_unknown_fields_pass() -> None:
    items = [
        {"type": "web_search_call", "id": 5, "action": [1]},  # skipped items keep whatever they hold
        {"type": "code_interpreter_call", "arguments": {"a": 1}},
        {"role": "user", "content": [{"type": "input_text", "text": "hi", "prompt_cache_breakpoint": {"mode": "explicit"}}],
         "phase": None, "status": "completed", "novel": {"x": [1]}},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}], "content": None,
         "encrypted_content": None},
        {**CALL, "status": "completed", "id": "fc_1", "caller": {"type": "direct"}},
        {"type": "function_call_output", "call_id": "c1", "output": "ok", "status": None, "name": "get_weather"},
    ]
    neutral, _, _ = convert(input=items, tools=[{**FN, "defer_loading": False}], include=["x"], prompt_cache_key="k",
                            text={"format": {"type": "text"}, "verbosity": "low"}, brand_new_field={"a": 1})
    assert [m.role for m in neutral.messages] == ["user", "assistant", "tool"]
    assert neutral.messages[1].reasoning == "think"


def test_the_response_echoes_the_clients_values_as_json() -> None:
    tools = [FN, {"type": "web_search", "search_context_size": "low"}, {**NS, "tools": [{"name": "read"}]}]
    text = {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}, "verbosity": "low"}
    req = ResponsesRequest(input="x", tools=tools, tool_choice={"type": "function", "name": "read", "namespace": "fs"},
                           text=text, reasoning={"effort": "low", "context": "auto"})
    assert req.echoed("tools") == tools and req.echoed("text") == text
    assert req.echoed("tool_choice") == {"type": "function", "name": "read", "namespace": "fs"}
    assert req.echoed("reasoning") == {"effort": "low", "context": "auto"}
    assert ResponsesRequest(input="x", tool_choice="required").echoed("tool_choice") == "required"
    assert ResponsesRequest(input="x").echoed("tools") is None
