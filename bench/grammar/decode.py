"""Decode speed with the mask applied to llama.cpp's logits, in place and in a custom sampler."""

from __future__ import annotations

import ctypes
import json
import statistics
import time
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals

from grammar.engines import XGrammar
from grammar.tools import call_schema, tools
from grammar.vocab import NEG_INF, THREADS, apply_mask, words

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
