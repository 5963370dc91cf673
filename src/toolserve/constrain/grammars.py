"""Lark grammars (llguidance's dialect) for tool calls in a family's own syntax, and for JSON.

A call grammar has two parts: the `trigger` that opens a call in the family's syntax, and the
`body` that must follow it. `tool_choice: "required"` or a named function constrains the whole
answer to trigger + body; `"auto"` lets the model write freely and applies the body only once
it has written the trigger (a lazy grammar), so any call it makes is valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolserve.errors import Unsupported
from toolserve.types import ToolSpec


@dataclass(frozen=True)
class CallGrammar:
    trigger: str  # what opens a call; "" when the whole answer is constrained from the start
    body: str  # Lark grammar (start rule) for what follows the trigger up to the end of the answer

    def full(self, lead_ws: bool = False) -> str:
        """The grammar for an answer that must be calls from its start (after blank space if
        `lead_ws`, as after a reasoning block)."""
        head = (" LEAD_WS" if lead_ws else "") + (f" {lit(self.trigger)}" if self.trigger else "")
        grammar = self.body.replace("start:", f"start:{head}", 1)
        return grammar + ("LEAD_WS: /[ \\t\\n]*/\n" if lead_ws else "")


def lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


# JSON is written one way: ", " and ": " between items, no other blank space. With free blank
# space a weak model can pad with newlines until max_tokens and never close the call.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_rule(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**closed(schema), "x-guidance": JSON_LAYOUT}, ensure_ascii=False)


def closed(schema: Any) -> Any:
    """Objects that declare `properties` but say nothing of others get `additionalProperties:
    false`: a model may otherwise invent keys without end. What the grammar then allows is a
    subset of what the schema allows, so every output still validates against the original."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas") and isinstance(v, dict):
            out[k] = {name: closed(sub) for name, sub in v.items()}  # a map of names to schemas
        elif k in ("const", "enum", "default", "examples", "required"):
            out[k] = v  # data, not schemas
        else:
            out[k] = closed(v)
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def params_schema(tool: ToolSpec) -> dict[str, Any]:
    schema = dict(tool.parameters or {})
    schema.setdefault("type", "object")
    return schema


def relocate(schema: dict[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Move a schema's `$defs` out under prefixed names, rewriting its local `$ref`s, so it can
    sit inside a larger document (several tools in one grammar). Returns (schema, defs)."""
    schema = dict(schema)
    own = {**schema.pop("definitions", {}), **schema.pop("$defs", {})}
    names = {k: f"{prefix}_{k}" for k in own}
    root = f"{prefix}_root"

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v) for k, v in node.items()}
            ref = out.get("$ref")
            if isinstance(ref, str):
                if ref == "#":
                    out["$ref"] = f"#/$defs/{root}"
                for head in ("#/$defs/", "#/definitions/"):
                    if ref.startswith(head) and ref[len(head) :].split("/")[0] in names:
                        key, _, rest = ref[len(head) :].partition("/")
                        out["$ref"] = f"#/$defs/{names[key]}" + (f"/{rest}" if rest else "")
            return out
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    fixed = fix(schema)
    defs = {names[k]: fix(v) for k, v in own.items()}
    if '"#"' in json.dumps(schema):
        defs[root] = fixed
    return fixed, defs


def call_object_schema(tools: Sequence[ToolSpec], args_key: str = "arguments") -> dict[str, Any]:
    """{"name": n, "arguments": {...}} for any one of `tools`, each with its own schema."""
    options, defs = [], {}
    for i, t in enumerate(tools):
        params, own = relocate(params_schema(t), f"t{i}")
        defs.update(own)
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, args_key: params},
                "required": ["name", args_key],
                "additionalProperties": False,
            }
        )
    out: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    return {**out, "$defs": defs} if defs else out


def _hermes(tools: Sequence[ToolSpec], parallel: bool) -> CallGrammar:
    # one optional newline around calls, no free blank space a weak model could pad with
    more = '\n    | "</tool_call>" NL "<tool_call>" NL call NL tail' if parallel else ""
    body = f"""start: NL call NL tail
tail: "</tool_call>"{more}
call: {json_rule(call_object_schema(tools))}
NL: /\\n?/
"""
    return CallGrammar("<tool_call>", body)


def _py_args(tool: ToolSpec) -> list[str]:
    """Rules for `name(k=v, ...)`: required parameters in order, then any of the optional ones
    in order. Values are JSON literals, which the pythonic parser reads (true/false/null too)."""
    params, defs = relocate(params_schema(tool), "p")
    props: dict[str, Any] = params.get("properties") or {}
    required = [p for p in params.get("required") or [] if p in props]
    optional = [p for p in props if p not in required]
    rid = _rule_id(tool.name)
    with_defs = (lambda v: {**v, "$defs": defs}) if defs else (lambda v: v)  # each value is its own document
    rules = [f"{rid}_{i}: {lit(p + '=')} {json_rule(with_defs(props[p]))}" for i, p in enumerate([*required, *optional])]
    req = [f"{rid}_{i}" for i in range(len(required))]
    opt = [f"{rid}_{i}" for i in range(len(required), len(props))]
    if req:
        args = ' ", " '.join(req) + "".join(f' (", " {o})?' for o in opt)
    elif opt:  # no required: any in-order selection, possibly empty
        starts = [o + "".join(f' (", " {later})?' for later in opt[k + 1 :]) for k, o in enumerate(opt)]
        args = "(" + " | ".join(starts) + ")?"
    else:
        args = ""
    return [f'{rid}: {lit(tool.name + "(")} {args} ")"', *rules]


def _rule_id(name: str) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in name.lower())


def _gemma3(tools: Sequence[ToolSpec], parallel: bool) -> CallGrammar:
    for t in tools:
        props = params_schema(t).get("properties") or {}
        if any(not k.isidentifier() for k in props):
            raise Unsupported(f"tool '{t.name}' has a parameter name that is not a Python identifier", param="tools")
    calls = " | ".join(_rule_id(t.name) for t in tools)
    rules = [r for t in tools for r in _py_args(t)]
    more = ' ("\\n" call)*' if parallel else ""
    body = f"""start: "\\n" call{more} "\\n```"
call: {calls}
""" + "\n".join(rules) + "\n"
    return CallGrammar("```tool_code", body)


def generic_json_schema(tools: Sequence[ToolSpec], parallel: bool, *, auto: bool) -> dict[str, Any]:
    """The JSON schema of a generic_json answer: a call list, or (auto) a call list or a plain
    response. Also what an upstream's guided JSON decoding gets in raw mode."""
    items = call_object_schema(tools)
    defs = items.pop("$defs", None)  # `#/$defs/...` refs resolve from the document's root
    calls: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
    if not parallel:
        calls["maxItems"] = 1
    listed = {"type": "object", "properties": {"tool_calls": calls}, "required": ["tool_calls"], "additionalProperties": False}
    plain = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"], "additionalProperties": False}
    out: dict[str, Any] = {"anyOf": [listed, plain]} if auto else listed
    return {**out, "$defs": defs} if defs else out


def _generic_json(tools: Sequence[ToolSpec], parallel: bool) -> CallGrammar:
    return CallGrammar("", f"start: {json_rule(generic_json_schema(tools, parallel, auto=False))}\n")


def generic_auto_grammar(tools: Sequence[ToolSpec], parallel: bool) -> str:
    """generic_json with tool_choice auto: the answer is a call list or a plain response."""
    return f"start: {json_rule(generic_json_schema(tools, parallel, auto=True))}\n"


def _json_list(trigger: str, args_key: str = "arguments") -> Callable[[Sequence[ToolSpec], bool], CallGrammar]:
    """Families whose calls are a JSON list after a marker: Mistral, Granite, FireFunction, Phi-4."""

    def build(tools: Sequence[ToolSpec], parallel: bool) -> CallGrammar:
        items: dict[str, Any] = {"type": "array", "items": call_object_schema(tools, args_key), "minItems": 1}
        if not parallel:
            items["maxItems"] = 1
        return CallGrammar(trigger, f"start: {json_rule(items)}\n")

    return build


BUILDERS: dict[str, Callable[[Sequence[ToolSpec], bool], CallGrammar]] = {
    "hermes": _hermes,
    "gemma3_tool_code": _gemma3,
    "generic_json": _generic_json,
    "granite": _json_list("<|tool_call|>"),
    "firefunction": _json_list(" functools"),
    "phi4_mini": _json_list("functools"),
}


def call_grammar(format_id: str, tools: Sequence[ToolSpec], parallel: bool) -> CallGrammar:
    builder = BUILDERS.get(format_id)
    if builder is None:
        raise Unsupported(
            f"constrained tool calls (tool_choice 'required' or a named function) are not available "
            f"for the '{format_id}' tool format yet; available for: {', '.join(sorted(BUILDERS))}",
            param="tool_choice",
        )
    return builder(tools, parallel)


def response_format_grammar(kind: str, schema: dict[str, Any] | None) -> str:
    if kind == "json_object":
        return f"start: {json_rule({'type': 'object'})}\n"
    return f"start: {json_rule(schema if schema is not None else {})}\n"
