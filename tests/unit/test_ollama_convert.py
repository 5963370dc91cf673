"""Ollama's requests -> the neutral request (api/ollama/convert.py), table by table; and the
rerank helpers (serving/rerank.py): the pair frame and the score."""

from __future__ import annotations

import json
import math

import pytest

from toolserve.api.ollama import convert
from toolserve.api.ollama import schemas as oll
from toolserve.errors import InvalidRequest
from toolserve.formats.template import MEDIA_MARKER
from toolserve.serving.rerank import pair_tokens, relevance


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (0, 0.0), ("0", 0.0), (300, 300.0), (1.5, 1.5), (-1, math.inf), ("-1s", math.inf), ("5m", 300.0),
     ("1h30m", 5400.0), ("250ms", 0.25), ("1.5h", 5400.0), ("10s", 10.0), ("+2m", 120.0)],
)
def test_keep_alive(value: object, seconds: float | None) -> None:
    assert convert.keep_alive_seconds(value) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "5", "5x", "m", "1h 30m", "five minutes", "1e3s"])
def test_keep_alive_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        convert.keep_alive_seconds(value)
    assert err.value.param == "keep_alive"


@pytest.mark.parametrize(
    ("fmt", "schema"),
    [(None, None), ("", None), ("json", ("json_object", None)),
     ({"type": "object", "properties": {"a": {"type": "integer"}}}, ("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}}))],
)
def test_format(fmt: object, schema: object) -> None:
    assert convert.response_schema(fmt) == schema  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("think", "kwargs", "returned"),
    [(None, {}, True), (True, {"enable_thinking": True}, True), (False, {"enable_thinking": False}, False),
     ("low", {"enable_thinking": True, "reasoning_effort": "low"}, True),
     ("max", {"enable_thinking": True, "reasoning_effort": "high"}, True)],
)
def test_think(think: object, kwargs: dict[str, object], returned: bool) -> None:
    assert convert.think_options(think) == (kwargs, returned)  # type: ignore[arg-type]


def test_options_take_ollamas_defaults_for_what_is_left_out() -> None:
    params, stops, max_tokens, given = convert.sampling(None)
    assert (params.temperature, params.top_k, params.top_p, params.min_p, params.seed) == (0.8, 40, 0.9, 0.0, None)
    assert (stops, max_tokens, given) == ((), None, frozenset())
    opts = oll.Options(temperature=0, top_k=5, seed=-1, stop="\n", num_predict=-1, repeat_penalty=1.2, num_ctx=0)
    params, stops, max_tokens, given = convert.sampling(opts)
    assert (params.temperature, params.top_k, params.top_p, params.seed, params.repetition_penalty) == (0.0, 5, 0.9, None, 1.2)
    assert (stops, max_tokens, given) == (("\n",), None, frozenset({"temperature", "top_k"}))
    assert convert.context_limit(opts) is None and convert.context_limit(oll.Options(num_ctx=512)) == 512
    params, stops, max_tokens, _ = convert.sampling(oll.Options(seed=7, stop=["a", "b"], num_predict=12))
    assert (params.seed, stops, max_tokens) == (7, ("a", "b"), 12)


def chat(*messages: dict[str, object], **extra: object) -> oll.ChatRequest:
    return oll.ChatRequest.model_validate({"messages": list(messages), **extra})


def test_history_pairs_tool_results_with_calls() -> None:
    req = chat(
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "thinking": "Two calls.", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_r", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
            {"function": {"name": "get_time", "arguments": {}}}]},
        {"role": "tool", "content": "12", "tool_name": "get_time"},  # by name
        {"role": "tool", "content": "sunny", "tool_call_id": "call_r"},  # by id
        {"role": "tool", "content": "rain"},  # the oldest open one
    )
    out = convert.chat_request(req, "m")
    assistant = out.messages[1]
    assert assistant.content is None and assistant.reasoning == "Two calls."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in assistant.tool_calls] == [
        ("call_1_0", "get_weather", {"city": "Paris"}), ("call_r", "get_weather", {"city": "Rome"}), ("call_1_2", "get_time", {})]
    assert [(m.role, m.tool_call_id, m.content) for m in out.messages[2:]] == [
        ("tool", "call_1_2", "12"), ("tool", "call_r", "sunny"), ("tool", "call_1_0", "rain")]


def test_images_go_before_the_text_as_data_uris() -> None:
    out = convert.chat_request(chat({"role": "user", "content": "What is it?", "images": ["aGk=", "aGk="]}), "m")
    assert out.messages[0].content == MEDIA_MARKER * 2 + "What is it?"
    assert [(i.where, i.url) for i in out.images] == [("messages[0].images[0]", "data:image/*;base64,aGk="),
                                                      ("messages[0].images[1]", "data:image/*;base64,aGk=")]
    with pytest.raises(InvalidRequest) as err:
        convert.chat_request(chat({"role": "assistant", "content": "x", "images": ["aGk="]}), "m")
    assert err.value.param == "messages[0].images"


def test_text_never_holds_a_media_marker_of_its_own() -> None:
    out = convert.chat_request(chat({"role": "user", "content": f"a{MEDIA_MARKER}b"}), "m")
    assert out.messages[0].content == "ab" and not out.images


def test_chat_request_carries_tools_format_think_and_options() -> None:
    tool = {"type": "function", "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}}}
    req = chat({"role": "user", "content": "hi"}, tools=[tool], format="json", think=False,
               options={"temperature": 0.1, "num_ctx": 256, "stop": ["x"]})
    out = convert.chat_request(req, "served-id")
    assert out.model == "served-id" and [t.name for t in out.options.tools] == ["f"]
    assert out.response_schema == ("json_object", None)
    assert out.options.template_kwargs == {"enable_thinking": False} and not out.options.include_reasoning
    assert (out.sampling.temperature, out.context_limit, out.stops) == (0.1, 256, ("x",))
    with pytest.raises(InvalidRequest):
        convert.chat_request(chat({"role": "user", "content": "hi"}, tools=[tool, tool]), "m")


def test_generate_is_one_user_turn_after_the_system_prompt() -> None:
    req = oll.GenerateRequest(prompt="Why?", system="Be brief.", images=["aGk="])
    out = convert.generate_request(req, "m")
    assert [(m.role, m.content) for m in out.messages] == [("system", "Be brief."), ("user", MEDIA_MARKER + "Why?")]
    assert out.images[0].where == "images[0]"


# -- rerank ---------------------------------------------------------------------------------------
def words(text: str, special: bool) -> list[int]:
    """A stand-in tokenizer: one token per word, special words marked negative when parsed."""
    return [-len(w) if special and w.startswith("<") else len(w) for w in text.split()]


@pytest.mark.parametrize(
    ("special", "expected"),
    [({"bos": 100, "eos": 101, "sep": None}, [100, 3, 5, 101, 4, 101]),  # Qwen-like: BOS q EOS d EOS
     ({"bos": 100, "eos": 101, "sep": 102}, [100, 3, 5, 101, 102, 4, 101]),  # XLM-R: <s> q </s></s> d </s>
     ({"bos": None, "eos": None, "sep": None}, [3, 5, 4])],
)
def test_pair_without_template(special: dict[str, int | None], expected: list[int]) -> None:
    assert pair_tokens(None, special, words, "abc defgh", "ijkl") == expected


def test_pair_with_the_models_template_is_filled_once_and_read_whole() -> None:
    frame = {"bos": 1, "eos": 2, "sep": None}
    template = "<s> Q: {query} D: {document} <e>"
    assert pair_tokens(template, frame, words, "ab {document}", "xyz") == [-3, 2, 2, 10, 2, 3, -3]  # "{document}" in the query stays text


@pytest.mark.parametrize(("arch", "row", "score"), [("qwen3", [0.7, 0.3], 0.7), ("bert", [0.0], 0.5),
                                                    ("xlm-roberta", [2.0], 1 / (1 + math.exp(-2.0))), ("bert", [-800.0], 0.0)])
def test_relevance(arch: str, row: list[float], score: float) -> None:
    assert relevance(arch, row) == pytest.approx(score)
