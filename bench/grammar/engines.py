"""llguidance and xgrammar behind one small interface."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from grammar.vocab import THREADS, Vocab

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
