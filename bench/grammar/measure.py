"""Compile, mask and apply times on a vocabulary, and the JSON-schema feature matrix."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np

from grammar.tools import call_schema, call_text, tools
from grammar.vocab import Vocab, allowed, apply_mask, bits_of, words

# ----------------------------------------------------------------------------------------------
# measurements


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def walk(
    eng: Any, m: Any, toks: list[int], bitmask: np.ndarray, times: list[float] | None, masks: list[np.ndarray] | None = None
) -> tuple[bool, str]:
    """Feed a token sequence, computing the mask before each token. -> (all allowed and accepted, why not)."""
    for t in toks:
        t0 = time.perf_counter()
        eng.fill(m, bitmask)
        dt = time.perf_counter() - t0
        if times is not None:
            times.append(dt)
        if masks is not None:
            masks.append(bitmask.copy())
        if not allowed(bitmask, t):
            return False, f"token {t} masked out"
        if not eng.consume(m, t):
            return False, f"token {t} refused: {eng.error(m)}"
    eng.fill(m, bitmask)
    return True, ""


def bench_vocab(eng: Any, v: Vocab, quick: bool) -> dict[str, Any]:
    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    tok = eng.tokenizer(v)
    res["tokenizer_s"] = time.perf_counter() - t0
    bitmask = np.zeros((1, words(v.n)), dtype=np.int32)
    reps = 3 if quick else 5
    for n in (1, 10, 50):
        ts = tools(n)
        schema = call_schema(ts)
        name, _, args = ts[0]
        toks = v.tokenize(call_text(name, args))
        compile_s, first_s = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            compiled = eng.compile(tok, schema)
            t1 = time.perf_counter()
            m = eng.matcher(compiled)
            eng.fill(m, bitmask)
            t2 = time.perf_counter()
            compile_s.append(t1 - t0)
            first_s.append(t2 - t0)
        cold: list[float] = []
        seen: list[np.ndarray] = []
        compiled = eng.compile(tok, schema)
        cached_s = []  # a request whose tool set was compiled before: new matcher + first mask
        for _ in range(reps):
            t0 = time.perf_counter()
            eng.fill(eng.matcher(compiled), bitmask)
            cached_s.append(time.perf_counter() - t0)
        ok, why = walk(eng, eng.matcher(compiled), toks, bitmask, cold, seen)
        eos_ok = all(allowed(bitmask, e) for e in v.eog) if ok else False
        warm: list[float] = []
        for _ in range(reps):
            walk(eng, eng.matcher(compiled), toks, bitmask, warm)
        # the last tool too (the end of the anyOf)
        lname, _, largs = ts[-1]
        ok_last, why_last = walk(eng, eng.matcher(compiled), v.tokenize(call_text(lname, largs)), bitmask, None)
        # a call with a wrong argument type must be refused
        bad = dict(args)
        bad[next(iter(bad))] = 12345 if isinstance(next(iter(bad.values())), str) else "x"
        bad_ok, _ = walk(eng, eng.matcher(compiled), v.tokenize(call_text(name, bad)), bitmask, None)
        res[f"tools{n}"] = {
            "compile_ms": statistics.median(compile_s) * 1e3,
            "first_mask_ms": statistics.median(first_s) * 1e3,
            "cached_first_mask_us": statistics.median(cached_s) * 1e6,
            "cold_med_us": statistics.median(cold) * 1e6,
            "cold_p99_us": pct(cold, 0.99) * 1e6,
            "cold_max_us": max(cold) * 1e6,
            "warm_med_us": statistics.median(warm) * 1e6,
            "warm_p99_us": pct(warm, 0.99) * 1e6,
            "tokens": len(toks),
            "valid_call_accepted": ok and ok_last,
            "why": why or why_last,
            "eos_allowed_at_end": eos_ok,
            "invalid_call_refused": not bad_ok,
        }
        if n == 10:
            masks_10 = seen
    # cost of turning the real masks of the 10-tool walk into -inf on a float32 logits row
    rng = np.random.default_rng(0)
    ap, density = [], []
    base = rng.standard_normal(v.n).astype(np.float32)
    for mk in masks_10 * 5:
        logits = base.copy()
        t0 = time.perf_counter()
        apply_mask(logits, mk, v.n)
        ap.append(time.perf_counter() - t0)
        b = bits_of(mk, v.n)
        assert np.array_equal(np.isfinite(logits), b.astype(bool))
        density.append(int(b.sum()))
    res["apply_us"] = statistics.median(ap) * 1e6
    res["apply_p99_us"] = pct(ap, 0.99) * 1e6
    res["allowed_tokens"] = [min(density), statistics.median(density), max(density)]
    # lazy grammar: free text, then a triggered call
    try:
        ts = tools(10)
        name, _, args = ts[0]
        schema = call_schema(ts)
        t0 = time.perf_counter()
        lazy = eng.compile_lazy(tok, schema)
        lazy_ms = (time.perf_counter() - t0) * 1e3
        text = "Sure, I will look that up for you now. "
        pre = v.tokenize(text)
        m = eng.matcher(lazy)
        free_t: list[float] = []
        ok_free, why_free = walk(eng, m, pre, bitmask, free_t)
        free_allowed = int(bits_of(bitmask, v.n).sum())
        ok_call, why_call = walk(eng, m, v.tokenize(call_text(name, args)), bitmask, None)
        bad = dict(args)
        bad["limit"] = "ten"
        m2 = eng.matcher(lazy)
        ok_bad, _ = walk(eng, m2, pre + v.tokenize(call_text(name, bad)), bitmask, None)
        res["lazy"] = {
            "compile_ms": lazy_ms,
            "free_text_accepted": ok_free,
            "free_text_mask_med_us": statistics.median(free_t) * 1e6 if free_t else None,
            "tokens_allowed_in_free_text": free_allowed,
            "call_after_text_accepted": ok_call,
            "bad_call_after_text_refused": not ok_bad,
            "why": why_free or why_call,
        }
    except Exception as exc:  # report, do not die
        res["lazy"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    res["_tok"] = tok
    return res


FEATURES: list[tuple[str, dict[str, Any], Any, Any]] = [
    # (feature, schema, valid instance, invalid instance or None)
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}, "ABC-12", "abc-12"),
    ("format: email", {"type": "string", "format": "email"}, "a@b.io", "not an email"),
    ("format: date-time", {"type": "string", "format": "date-time"}, "2026-11-22T10:00:00Z", "yesterday"),
    ("format: uuid", {"type": "string", "format": "uuid"}, "123e4567-e89b-12d3-a456-426614174000", "xyz"),
    ("minLength/maxLength", {"type": "string", "minLength": 2, "maxLength": 4}, "abc", "abcdefg"),
    ("minimum/maximum", {"type": "integer", "minimum": 1, "maximum": 9}, 5, 42),
    ("exclusiveMinimum", {"type": "number", "exclusiveMinimum": 0}, 0.5, 0),
    ("multipleOf", {"type": "integer", "multipleOf": 5}, 15, 7),
    ("minItems/maxItems", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}, [1, 2], [1]),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 2], [1, 1]),
    ("prefixItems", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, ["a", 1], [1, "a"]),
    ("contains", {"type": "array", "items": {"type": "integer"}, "contains": {"const": 7}}, [1, 7], [1, 2]),
    ("enum (mixed)", {"enum": ["a", 1, None, True]}, 1, "b"),
    ("const", {"const": {"k": "v"}}, {"k": "v"}, {"k": "w"}),
    ("anyOf", {"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["x"]}]}, "x", "y"),
    ("oneOf", {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, True, "s"),
    ("allOf", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]},
     {"a": 1, "b": "x"}, {"a": 1}),
    ("not", {"type": "integer", "not": {"const": 3}}, 4, 3),
    ("if/then/else", {"type": "object", "properties": {"k": {"type": "string"}, "v": {}},
                      "if": {"properties": {"k": {"const": "n"}}}, "then": {"properties": {"v": {"type": "integer"}}},
                      "else": {"properties": {"v": {"type": "string"}}}}, {"k": "n", "v": 1}, {"k": "n", "v": "s"}),
    ("$ref (non-recursive)", {"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
                                              "additionalProperties": False}},
                              "type": "object", "properties": {"a": {"$ref": "#/$defs/p"}}, "required": ["a"]},
     {"a": {"x": 1}}, {"a": {"x": "1"}}),
    ("$ref recursion", {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                                           "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
     {"v": 1, "kids": [{"v": 2, "kids": []}]}, {"v": 1, "kids": [{"w": 2}]}),
    ("additionalProperties: false", {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
     {"a": 1}, {"a": 1, "b": 2}),
    ("additionalProperties omitted", {"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": 1, "b": 2}, None),
    ("additionalProperties: schema", {"type": "object", "additionalProperties": {"type": "integer"}}, {"x": 1}, {"x": "s"}),
    ("patternProperties", {"type": "object", "patternProperties": {"^n_": {"type": "integer"}}, "additionalProperties": False},
     {"n_a": 1}, {"m_a": 1}),
    ("propertyNames", {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "additionalProperties": {"type": "integer"}},
     {"ab": 1}, {"AB": 1}),
    ("minProperties", {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2}, {"a": 1, "b": 2}, {"a": 1}),
    ("dependentRequired", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}}, {"a": 1, "b": 2}, {"a": 1}),
    ("type list [string,null]", {"type": ["string", "null"]}, None, 1),
    ("unknown keyword", {"type": "string", "x-frobnicate": 3}, "s", 1),
    ("remote $ref", {"$ref": "https://example.com/schema.json"}, "s", None),
]


def feature_matrix(eng: Any, v: Vocab, tok: Any) -> dict[str, str]:
    bitmask = np.zeros((1, words(v.n)), dtype=np.int32)
    out = {}
    for feat, schema, good, bad in FEATURES:
        try:
            compiled = eng.compile_json(tok, schema)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            out[feat] = "compile error: " + msg[:110]
            continue

        def accepts(inst: Any) -> bool:
            m = eng.matcher(compiled)
            ok, _ = walk(eng, m, v.tokenize(json.dumps(inst)), bitmask, None)
            return ok and eng.accepting(m)

        g_ok = accepts(good)
        if bad is None:
            out[feat] = "accepts valid" if g_ok else "REJECTS VALID"
        elif not g_ok:
            out[feat] = "REJECTS VALID instance"
        else:
            out[feat] = "enforced" if not accepts(bad) else "ignored (invalid accepted)"
    return out
