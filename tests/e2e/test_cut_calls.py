"""Calls cut by max_tokens under tool_choice "required" on the bundled model: returned as
generated, never with an invented key or value, and schema-valid whenever not cut."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

from tests.unit.formats.test_cut_calls import partial_of

from .test_tools import BOOK, REFS, SCHEMAS, WEATHER, both

PROMPT = [{"role": "user", "content": "Please help me with my plans for tomorrow evening."}]


def types_fit(value: Any, schema: dict[str, Any], defs: dict[str, Any]) -> bool:
    """Every value present has a type its schema allows (a cut call may lack members, not fake them)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema:
        return any(types_fit(value, s, defs) for s in schema["anyOf"])
    kind = schema.get("type")
    checks = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}
    if kind == "null":
        return value is None
    if kind in checks and (not isinstance(value, checks[kind]) or (kind != "boolean" and isinstance(value, bool))):
        return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return all(k in props and types_fit(v, props[k], defs) for k, v in value.items())
    if isinstance(value, list):
        return all(types_fit(v, schema.get("items", {}), defs) for v in value)
    return True


# max_tokens chosen so most cuts land inside the arguments (the call's head is about 20 tokens)
CASES = [(seed, temperature, tools, max_tokens)
         for seed, (tools, max_tokens) in enumerate([([BOOK], 22), ([REFS], 25), ([WEATHER, BOOK, REFS], 28), ([BOOK], 33)])
         for temperature in (0.0, 0.8, 1.3)]


@pytest.mark.parametrize(("seed", "temperature", "tools", "max_tokens"), CASES)
def test_cut_required_call_is_returned_as_generated(client: OpenAI, model_id: str, seed: int, temperature: float,
                                                    tools: list, max_tokens: int) -> None:
    kw = {"model": model_id, "messages": PROMPT, "tools": tools, "tool_choice": "required",
          "parallel_tool_calls": False, "temperature": temperature, "seed": seed}
    cut = both(client, max_tokens=max_tokens, **kw)  # streaming and not: the same message
    full = both(client, max_tokens=300, **kw)  # the same seed, let run to its end
    for call in full["calls"]:
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    if cut["finish"] != "length":
        assert cut == {**full, "calls": cut["calls"]} and cut["finish"] == "tool_calls"
        for call in cut["calls"]:
            jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
        return
    assert len(cut["calls"]) <= 1
    for call in cut["calls"]:
        args = json.loads(call["arguments"])  # valid JSON, closed where the model was cut
        schema = SCHEMAS[call["name"]]
        assert types_fit(args, schema, schema.get("$defs", {})), call  # never a null for a string
        # the same seed run longer wrote these tokens and more: the cut call holds a prefix of it
        assert call["name"] == full["calls"][0]["name"]
        assert partial_of(args, json.loads(full["calls"][0]["arguments"])), (call, full["calls"][0])
