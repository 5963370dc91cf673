"""Rules of ours on the way out (issue 32): a call repeated in the same answer ends the answer
unreturned; under a calls-only grammar no content is returned, so a cut call marker never
becomes text. Any split of the model's text gives the same answer."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from toolserve.formats.deltas import rebuild
from toolserve.formats.registry import FORMATS
from toolserve.serving.chat import ChatOptions, OutputShaper
from toolserve.types import ToolSpec

WEATHER = ToolSpec("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}})
OPTS = ChatOptions(tools=(WEATHER,), tool_choice="required")


def call(city: str) -> str:
    return f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}\n</tool_call>\n'


def shaped(text: str, cuts: list[int], calls_only: bool = False) -> tuple[OutputShaper, list]:
    shaper = OutputShaper(FORMATS["hermes"], OPTS, thinking_open=False, parse=True, calls_only=calls_only)
    deltas, at = [], 0
    for cut in [*sorted({min(c, len(text)) for c in cuts}), len(text)]:
        deltas += shaper.feed(text[at:cut])
        at = cut
    deltas += shaper.finish()
    return shaper, deltas


@given(st.lists(st.integers(0, 400), max_size=12))
def test_a_repeated_call_ends_the_answer_unreturned(cuts: list[int]) -> None:
    text = call("Paris") + call("Rome") + call("Paris") + call("Oslo")
    shaper, deltas = shaped(text, cuts)
    got = rebuild(deltas)
    assert [json.loads(c.arguments)["city"] for c in got.tool_calls] == ["Paris", "Rome"]
    assert shaper.stopped and shaper.calls == 2


@given(st.lists(st.integers(0, 400), max_size=12))
def test_a_call_that_only_starts_like_an_earlier_one_is_returned(cuts: list[int]) -> None:
    text = call("Paris") + call("Pari") + call("Paris Texas")
    shaper, deltas = shaped(text, cuts)
    assert [json.loads(c.arguments)["city"] for c in rebuild(deltas).tool_calls] == ["Paris", "Pari", "Paris Texas"]
    assert not shaper.stopped


@given(st.lists(st.integers(0, 200), max_size=8))
def test_calls_only_returns_no_text_not_even_a_cut_marker(cuts: list[int]) -> None:
    text = " " + call("Paris") + "<tool"  # max_tokens cut the next call's marker
    _, deltas = shaped(text, cuts, calls_only=True)
    got = rebuild(deltas)
    assert got.content == "" and [json.loads(c.arguments)["city"] for c in got.tool_calls] == ["Paris"]
    _, free = shaped(text, cuts)
    assert rebuild(free).content == "<tool"  # without the rule it was text
