"""Parser misses found on held-out vectors from other servers' suites (issue 32), one row each:
read whole and one character at a time, the same message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolserve.formats.deltas import rebuild
from toolserve.formats.registry import FORMATS
from toolserve.types import ToolSpec


def tool(name: str, **props: Any) -> ToolSpec:
    return ToolSpec(name, name, {"type": "object", "properties": props})


WEATHER = tool("get_weather", city={"type": "string"})
CASES = [
    # a schema that says "float" (Python's name) types the value as JSON's number
    ("qwen3_coder", [tool("set_temp", value={"type": "float"}, steps={"type": "int"})],
     "<tool_call>\n<function=set_temp>\n<parameter=value>\n21.5\n</parameter>\n<parameter=steps>\n3\n</parameter>\n</function>\n</tool_call>",
     "", [("set_temp", {"value": 21.5, "steps": 3})]),
    # Command A's citation markup goes, the cited text stays
    ("command_r", [], "<|START_RESPONSE|>It is <co>sunny</co: 0:[1]> in <co: 1>Paris</co: 1>.<|END_RESPONSE|>",
     "It is sunny in Paris.", []),
    # a second Python list in the same LFM2 block
    ("lfm2", [WEATHER], '<|tool_call_start|>[get_weather(city="Paris")][get_weather(city="Rome")]<|tool_call_end|>',
     "", [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
    # GLM 4.6/4.7 values escaped as JSON strings are: an object once more, a literal \n
    ("glm45", [tool("run", code={"type": "string"}, opts={"type": "object"})],
     '<tool_call>run\n<arg_key>code</arg_key>\n<arg_value>a\\nb \\"q\\"</arg_value>\n<arg_key>opts</arg_key>\n'
     '<arg_value>{\\"x\\": [1, 2]}</arg_value>\n</tool_call>',
     "", [("run", {"code": 'a\nb "q"', "opts": {"x": [1, 2]}})]),
]


@pytest.mark.parametrize(("fmt_id", "tools", "text", "content", "calls"), CASES, ids=[c[0] for c in CASES])
def test_read_as_the_other_servers_read_it(fmt_id: str, tools: list[ToolSpec], text: str, content: str,
                                          calls: list[tuple[str, dict[str, Any]]]) -> None:
    fmt = FORMATS[fmt_id]
    whole = fmt.parse(text, tools)
    parser = fmt.new_parser(tools)
    deltas = [d for ch in text for d in parser.feed(ch)] + parser.finish()
    split = rebuild(deltas)
    for got in (whole, split):
        assert got.content == content
        assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == calls
