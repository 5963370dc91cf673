"""Writing Lark grammars (llguidance's dialect) for what the body readers read.

Each body reader (json_bodies, named_json_bodies, markup_bodies, kv_bodies, pythonic, and a
family's own) has a `grammar` class method next to its parser: given the offered tools it
writes the Lark expression of one block as the family writes it, with each argument's value
following the tool's JSON schema in the family's encoding (JSON, raw text, Python literals,
`k:v`). `formats/constraint.py` joins a family's trigger, body and close into the constraint of
a request. This module holds the writing kit they share: a `Writer` of named rules, the value
writers and JSON schema helpers. Pure text: nothing here knows llguidance or a vocabulary
(special tokens come in as ids).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..types import ToolSpec
from .schema import json_type, types_of


def lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


_RX_SPECIAL = re.compile(r"[.+*?()|\[\]{}^$\\/]")
_RX_CONTROL = {"\n": r"\n", "\t": r"\t", "\r": r"\r"}


def rx(text: str) -> str:
    """`text` as a literal inside a Lark `/regex/` (Rust regex syntax: `\\<` would be a word
    boundary there, so only the regex's own metacharacters are escaped)."""
    out = _RX_SPECIAL.sub(lambda m: "\\" + m.group(), text)
    return "".join(_RX_CONTROL.get(c, c) for c in out)


# JSON is written one way: ", " and ": " between items, no other blank space. With free blank
# space a weak model can pad with newlines until max_tokens and never close the call.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_rule(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**closed(schema), "x-guidance": JSON_LAYOUT}, ensure_ascii=False)


def closed(schema: Any) -> Any:
    """Objects that declare `properties` but say nothing of others get `additionalProperties:
    false`: a model may otherwise invent keys without end. What the grammar then allows is a
    subset of what the schema allows, so every output still validates against the original.
    Type names such as `float` become JSON Schema's (`number`)."""
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
        elif k == "type":  # `float` and other names schemas written by hand use
            out[k] = [json_type(t) for t in v] if isinstance(v, list) else json_type(v)
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


def call_object_schema(
    tools: Sequence[ToolSpec], args_key: str = "arguments", name_key: str = "name", id_key: str | None = None,
    id_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """{"name": n, "arguments": {...}} for any one of `tools`, each with its own schema (with
    `id_key`, an id of `id_schema` first, as Command R and Mistral write it)."""
    options, defs = [], {}
    for i, t in enumerate(tools):
        params, own = relocate(params_schema(t), f"t{i}")
        defs.update(own)
        props: dict[str, Any] = {name_key: {"const": t.name}, args_key: params}
        if id_key is not None:
            props = {id_key: id_schema or {"type": "string"}, **props} if id_key == "tool_call_id" else {**props, id_key: id_schema or {"type": "string"}}
        options.append({"type": "object", "properties": props, "required": list(props), "additionalProperties": False})
    out: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    return {**out, "$defs": defs} if defs else out


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


def response_format_grammar(kind: str, schema: dict[str, Any] | None) -> str:
    if kind == "json_object":
        return f"start: {json_rule({'type': 'object'})}\n"
    return f"start: {json_rule(schema if schema is not None else {})}\n"


# ---- the writer ------------------------------------------------------------------------------


class Writer:
    """The rules of one grammar being written. A rule is named from a hint and a number; a rule
    whose body was written before is reused (the same value schema in many tools).
    `specials`: the family's markers that are single special tokens of the model's vocabulary,
    with their ids: such a marker is matched as that token (llguidance reads special tokens only
    by id) or as its text (a model may spell it out; the parsers read either)."""

    def __init__(self, specials: Mapping[str, int] | None = None) -> None:
        self.specials = dict(specials or {})
        # the special tokens inside a marker, longest first (a marker may be two: `<|a|><|b|>`)
        words = sorted((t for t in self.specials if t), key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, words))) if words else None
        self._rules: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._lazy: set[str] = set()

    def rule(self, hint: str, body: str) -> str:
        """A rule (lower-case name) for `body`; the same body gets the same rule."""
        return self._named(hint.lower(), body)

    def lazy(self, hint: str, body: str) -> str:
        """A lazy rule: one lexeme (`body` a token expression) that ends at its first match,
        text up to a marker and the marker (llguidance's `[lazy]`)."""
        name = self._named(hint.lower(), body, kind="lazy")
        self._lazy.add(name)
        return name

    def terminal(self, hint: str, regex: str) -> str:
        """A terminal (upper-case name): one lexeme, for text matched by a regex."""
        return self._named(hint.upper(), regex)

    def _named(self, hint: str, body: str, kind: str = "") -> str:
        key = f"{kind or hint[0].isupper()}:{body}"
        if key in self._names:
            return self._names[key]
        base = re.sub(r"\W", "_", hint)[:24] or "r"
        name = f"{base}_{len(self._rules)}"
        self._names[key] = name
        self._rules[name] = body
        return name

    def mark(self, text: str) -> str:
        """A marker of the family's syntax, each special token in it as that token or its text."""
        if not text or self._special_re is None:
            return lit(text) if text else ""
        parts, at = [], 0
        for m in self._special_re.finditer(text):
            if m.start() > at:
                parts.append(lit(text[at : m.start()]))
            parts.append(f"(<[{self.specials[m.group()]}]> | {lit(m.group())})")
            at = m.end()
        if at < len(text):
            parts.append(lit(text[at:]))
        return " ".join(parts)

    def grammar(self, start: str, *, header: str = "") -> str:
        lines = [f"start: {start}"]
        lines += [f"{name}{'[lazy]' if name in self._lazy else ''}: {body}" for name, body in self._rules.items()]
        return header + "\n".join(lines) + "\n"


def seq(*parts: str) -> str:
    """Lark expressions in a row (empty ones left out)."""
    return " ".join(p for p in parts if p)


def alt(options: Sequence[str]) -> str:
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


# ---- a tool's parameters ----------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """A tool's parameter schema ready for writing: its `$defs` moved out under names of its
    own (several tools share one grammar), and each parameter's schema with a top-level `$ref`
    resolved (to know its type)."""

    schema: dict[str, Any]
    defs: dict[str, Any]
    required: tuple[str, ...]
    order: tuple[str, ...]  # every parameter, as the schema lists them

    @classmethod
    def of(cls, tool: ToolSpec, index: int) -> Params:
        schema, defs = relocate(params_schema(tool), f"t{index}")
        found = schema.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = tuple(p for p in schema.get("required") or () if isinstance(p, str) and p in props)
        return cls(schema, defs, required, tuple(props))

    def prop(self, key: str) -> dict[str, Any]:
        """A parameter's schema, following a `$ref` at its top."""
        sub = (self.schema.get("properties") or {}).get(key)
        return self.resolve(sub) if isinstance(sub, dict) else {}

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`schema` with a `$ref` at its top followed (a chain of them, bounded)."""
        for _ in range(8):
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
                break
            target = self.defs.get(ref[len("#/$defs/") :])
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}} if isinstance(target, dict) else {}
        return schema

    def document(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A value's schema as a document of its own: with the tool's definitions."""
        return {**schema, "$defs": self.defs} if self.defs else schema


def members(w: Writer, params: Params, member: Callable[[str], str], sep: str, hint: str = "arg") -> str:
    """The parameters in the schema's order, each required one present and any optional one
    present or not (`member(key)` writes one, `sep` goes between two). The readers take any
    order; this is the one the schema shows the model."""
    keys = [*params.order]
    if not keys:
        return ""
    written = [w.rule(hint, member(k)) for k in keys]
    required = set(params.required)
    # rest[k]: the members from k on, after one was written (each behind a separator)
    rest = [""] * (len(keys) + 1)
    for k in reversed(range(len(keys))):
        part = seq(sep, written[k])
        rest[k] = w.rule(f"{hint}_rest", seq(part if keys[k] in required else f"({part})?", rest[k + 1]))
    # first: the members from k on, none written yet (the first one written has no separator)
    first = ""
    for k in reversed(range(len(keys))):
        take = seq(written[k], rest[k + 1])
        if keys[k] in required:
            first = w.rule(f"{hint}_first", take)
        else:
            first = w.rule(f"{hint}_first", f"{take} | {first}") if first else f"({take})?"
    return first


# ---- values ------------------------------------------------------------------------------------


def json_value(w: Writer, schema: dict[str, Any]) -> str:
    """A value as JSON (one layout, objects closed: `json_rule`)."""
    return w.rule("json", json_rule(schema))


_SIMPLE_PATTERN = re.compile(r"^[\w\s\[\]\-^$.*+?{},|]*$")


def text_value(w: Writer, schema: dict[str, Any], stops: Sequence[str], close: str, hint: str = "text", layout: bool = False, escaped: bool = False) -> str:
    """A string value as raw text that holds none of `stops` (the markers that end it), then
    the `close` marker; or one of its `enum`/`const` strings (then a newline before the close
    where the reader takes one as `layout`). `minLength`/`maxLength` and a plain `pattern`
    bound the text too; `escaped` (a reader that decodes JSON's short escapes) counts an escape
    as the one character it reads as, and allows no other backslash in a bounded text.

    llguidance's lexer takes the longest match and never backs up, so raw text cannot be one
    lexeme and its close another: "Paris</para" is still text when "meter>" arrives. The text
    and its close are one terminal, unless the close is a special token of the vocabulary
    (no text holds it; it ends the text as a lexeme of its own)."""
    token = w.specials.get(close)
    options = schema.get("enum") if isinstance(schema.get("enum"), list) else [schema["const"]] if "const" in schema else None
    if options is not None:
        words = [lit(o) for o in options if isinstance(o, str) and not any(s in o for s in stops if s)]
        if words:
            return seq(optional_newline() if layout else "", alt(words), optional_newline() if layout else "", w.mark(close))
    ends = "|".join(rx(s) for s in stops if s)
    tail = f"(?s:.{{{len(close)},}})" if token is None else ""
    end = rx(close) if token is None else ""
    # layout newlines around a bounded text are no part of it (the lexer reads the leading one
    # as text: it cannot know yet that a literal "\n" was meant)
    lead, bounded_end = ("\\n?", "\\n?" + end) if layout else ("", end)
    bounds = []  # each ends with the close too
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) or isinstance(high, int):
        lo = max(low, 0) if isinstance(low, int) else 0
        unit = r'(?:[^\\]|\\[ntr"\\\/])' if escaped else "."
        bounds.append(f"/{lead}(?s:{unit}{{{lo},{high if isinstance(high, int) else ''}}}){bounded_end}/")
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and _SIMPLE_PATTERN.match(pattern) and "/" not in pattern:
        inner = pattern[1:] if pattern.startswith("^") else "(?s:.*)" + pattern
        inner = inner[:-1] if inner.endswith("$") and not inner.endswith("\\$") else inner + "(?s:.*)"
        bounds.append(f"/{lead}(?:{inner}){bounded_end}/")
    # any text and the close, unless a bound says so already: one more intersection with a
    # bound's counted repetition ran llguidance's lexer out of its expression budget on a real
    # vocabulary (`maxLength: 30` under Qwen3-Coder's markup, SmolLM2's 49k tokens)
    parts = (bounds or [f"/(?s:.*){end}/"]) + ([f"~/(?s:.*(?:{ends}){tail})/"] if ends else [])
    text = w.terminal(hint, " & ".join(parts))
    return text if token is None else seq(text, f"<[{token}]>")


def is_text(schema: dict[str, Any]) -> bool:
    """A value kept as raw text by the markup readers: typed as a string, or untyped."""
    return types_of(schema) <= {"string"}


def markup_value(w: Writer, params: Params, schema: dict[str, Any], stops: Sequence[str], close: str, layout: bool = True, escaped: bool = False) -> str:
    """A parameter's value between markup tags (qwen3_coder, glm45, minimax, DSML), with its
    close: a string as raw text, any other type as its JSON literal, which the readers type
    from the schema. `layout`: one newline may stand after the open tag and one before the
    close, which the reader takes as layout; never two (a bounded text lexes its leading one
    itself, an unbounded text keeps any as text)."""
    types = types_of(schema)
    if types <= {"string"}:
        return text_value(w, schema, stops, close, layout=layout, escaped=escaped)
    nl = optional_newline() if layout else ""
    value = seq(nl, json_value(w, params.document(schema)), nl, w.mark(close))
    return value if "string" not in types else alt([value, text_value(w, {}, stops, close)])


@dataclass(frozen=True)
class Literals:
    """How a family spells values that are not JSON text: Python literals (the pythonic
    families), the `k:v` syntax (functiongemma, gemma4). Strings, keys, separators and the
    three words; numbers are JSON's in both."""

    string: Callable[[Writer, dict[str, Any]], str]
    key: Callable[[str], str]  # an object's key with what follows it, before the value
    sep: str  # between the members of an object or the items of a list (a Lark literal)
    true: str
    false: str
    null: str


PYTHON = Literals(lambda w, schema: json_value(w, schema), lambda k: lit(f"{json.dumps(k, ensure_ascii=False)}: "),
                  '", "', '"True"', '"False"', '"None"')


def kv_literals(esc: str) -> Literals:
    return Literals(lambda w, schema: seq(w.mark(esc), text_value(w, schema, [esc], esc)), lambda k: lit(f"{k}:"),
                    '","', '"true"', '"false"', '"null"')


def literal_value(w: Writer, params: Params, schema: dict[str, Any], style: Literals, depth: int = 0) -> str:
    """A value of `schema` spelled as `style` spells values: each type the schema allows in its
    own form, objects member by member, lists item by item (beyond 8 levels, JSON text)."""
    schema = params.resolve(schema)
    if depth >= 8:
        return json_value(w, params.document(schema))
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and any(isinstance(b, dict) for b in branches):
        return alt([literal_value(w, params, b, style, depth + 1) for b in branches if isinstance(b, dict)])
    if "enum" in schema or "const" in schema:
        values = schema.get("enum") if isinstance(schema.get("enum"), list) else [schema.get("const")]
        if all(isinstance(v, str) for v in values or ()):
            return style.string(w, {"enum": values})
        return alt([_word(w, v, style) for v in values or ()])
    types = sorted(types_of(schema))
    if not types:
        return json_value(w, params.document(schema))
    options = []
    for t in types:
        one = {**schema, "type": t}
        if t == "string":
            options.append(style.string(w, one))
        elif t == "boolean":
            options.append(f"({style.true} | {style.false})")
        elif t == "null":
            options.append(style.null)
        elif t == "object" and isinstance(schema.get("properties"), dict):
            props = schema["properties"]
            inner = Params(one, params.defs, tuple(k for k in schema.get("required") or () if k in props), tuple(props))

            def member(key: str, inner: Params = inner) -> str:
                return seq(style.key(key), literal_value(w, params, inner.prop(key), style, depth + 1))

            options.append(seq('"{"', members(w, inner, member, style.sep, "member"), '"}"'))
        elif t == "array" and isinstance(schema.get("items"), dict):
            item = w.rule("item", literal_value(w, params, schema["items"], style, depth + 1))
            options.append(f'"[" {items_between(item, style.sep, schema.get("minItems"), schema.get("maxItems"))} "]"')
        else:  # numbers; objects and lists without a shape: JSON text, which both readers take
            options.append(json_value(w, params.document(one)))
    return alt(options)


MAX_SPELT_ITEMS = 32  # maxItems above this is not spelt out in the grammar (left unbounded)


def items_between(item: str, sep: str, lo: Any, hi: Any) -> str:
    """`lo` to `hi` items separated by `sep` (minItems / maxItems; missing: 0 and no bound)."""
    lo = lo if isinstance(lo, int) and not isinstance(lo, bool) and lo > 0 else 0
    hi = hi if isinstance(hi, int) and not isinstance(hi, bool) and hi >= lo and hi <= MAX_SPELT_ITEMS else None
    if hi == 0:
        return ""
    first, tail = max(lo, 1), f"({sep} {item})*"
    if hi is not None:  # hi - first more at most, each inside the one before
        tail = ""
        for _ in range(hi - first):
            tail = f"({sep} {item} {tail})?"
    body = " ".join([item, *[f"{sep} {item}"] * (first - 1), tail])
    return body if lo else f"({body})?"


def _word(w: Writer, value: Any, style: Literals) -> str:
    """One value of an enum, as the style spells it."""
    if value is True or value is False or value is None:
        return {True: style.true, False: style.false, None: style.null}[value]
    if isinstance(value, str):
        return style.string(w, {"const": value})
    return lit(json.dumps(value, ensure_ascii=False))


def text_until(w: Writer, close: str, hint: str = "thought") -> str:
    """Free text up to the first `close` marker, and the marker (a reasoning block's body)."""
    return text_value(w, {}, [close], close, hint)


def optional_newline() -> str:
    """A layout newline, which the readers take or leave."""
    return '"\\n"?'
