"""Typing untyped argument text from a tool's JSON schema.

Families such as qwen3_coder or glm45 write every parameter value as raw text, and small
models write positional or shell-style arguments; these helpers give each value the type the
tool's schema asks for, falling back to the plain string when the text does not fit.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from .jsonstream import loads

_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null",
               list: "array", dict: "object"}


def prop_schema(params: dict[str, Any], key: str) -> dict[str, Any]:
    props = params.get("properties") if isinstance(params, dict) else None
    sub = props.get(key) if isinstance(props, dict) else None
    return sub if isinstance(sub, dict) else {}


# type names that tool schemas written by hand (and Qwen3-Coder's own examples) use for JSON's
TYPE_ALIASES = {"float": "number", "double": "number", "int": "integer", "long": "integer", "bool": "boolean",
                "str": "string", "dict": "object", "list": "array"}


def json_type(name: Any) -> Any:
    """A schema's type name as JSON Schema spells it (`float` -> `number`)."""
    return TYPE_ALIASES.get(name, name) if isinstance(name, str) else name


def types_of(schema: dict[str, Any]) -> set[str]:
    """The JSON types a schema allows (empty set: unknown, treated as string)."""
    t = schema.get("type")
    if isinstance(t, str):
        return {json_type(t)}
    if isinstance(t, list):
        return {json_type(x) for x in t if isinstance(x, str)}
    found: set[str] = set()
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, dict):
                found |= types_of(sub)
    for value in schema.get("enum") or ([schema["const"]] if "const" in schema else []):
        found.add(_JSON_TYPES.get(type(value), "string"))
    if not found and "properties" in schema:
        found.add("object")
    if not found and "items" in schema:
        found.add("array")
    return found


def is_plain_string(schema: dict[str, Any]) -> bool:
    """True when a raw value is always kept as text (so it can stream as it arrives)."""
    return types_of(schema) <= {"string"}


class NotJson(ValueError):
    """A literal JSON cannot hold (complex, NaN, infinity, a set's or an Ellipsis' like)."""


def jsonable(value: Any) -> Any:
    """A Python literal's value as JSON holds it: tuples and sets as lists, bytes as text, keys
    as strings. NotJson for anything else, which `json.dumps` would refuse or write as NaN."""
    if isinstance(value, str):
        if _SURROGATE.search(value):  # "\ud83d\ude00" is one character in JSON, two in Python
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return value
    if isinstance(value, (tuple, list, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise NotJson(f"{type(value).__name__} {value!r:.40}")


def _parse_literal(raw: str) -> Any:
    try:
        return loads(raw)
    except ValueError:
        pass
    try:  # Python-style literals: single quotes, True/False/None
        return jsonable(ast.literal_eval(raw))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return raw


def coerce(raw: str, schema: dict[str, Any]) -> Any:
    """`raw` typed as the schema asks; the string itself when it does not fit."""
    types = types_of(schema)
    if types <= {"string"}:
        return raw
    text = raw.strip()
    low = text.lower()
    for t in ("null", "boolean", "integer", "number", "object", "array"):
        if t not in types:
            continue
        if t == "null" and low in ("null", "none"):
            return None
        if t == "boolean" and low in ("true", "false"):
            return low == "true"
        if t == "integer":
            try:
                return int(text)
            except ValueError:
                try:
                    f = float(text)
                except ValueError:
                    continue
                if f.is_integer():
                    return int(f)
        if t == "number":
            try:
                return int(text)
            except ValueError:
                pass
            try:
                f = float(text)
            except ValueError:
                continue
            if f == f and f not in (float("inf"), float("-inf")):
                return f
        if t in ("object", "array"):
            value = _parse_literal(text)
            if isinstance(value, dict if t == "object" else list):
                return value
    return raw


def guess(raw: str) -> Any:
    """A bare value written without quotes and without a schema: JSON literal or text."""
    text = raw.strip()
    try:
        value = loads(text)
    except ValueError:
        return raw
    return value


def ordered_params(params: dict[str, Any]) -> list[str]:
    """Parameter names in schema order, required ones first (for positional arguments)."""
    props = params.get("properties") if isinstance(params, dict) else None
    names = list(props) if isinstance(props, dict) else []
    required = [n for n in (params.get("required") or []) if n in names] if names else []
    return required + [n for n in names if n not in required]
