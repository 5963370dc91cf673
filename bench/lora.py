"""LoRA adapter turns: what two concurrent requests under different adapters cost against two under
the same one, for several lengths of a turn (engine/scheduler.py ADAPTER_TURN).

llama.cpp applies adapters to the whole context, so a decode step holds one adapter set's
requests; sets with work take turns of ADAPTER_TURN steps, and each switch makes llama.cpp
reserve its graph again. The engine is driven directly (no HTTP), with two random rank-8 adapters
for the bundled model written by tests/lora.py; conditions alternate run by run.

    python bench/lora.py [--runs 3] [--tokens 128] [--threads 2] [--turns 1,8,32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.lora import make_lora  # noqa: E402

import toolserve.engine.llama_cpp as engine_module  # noqa: E402
import toolserve.engine.scheduler as scheduler_module  # noqa: E402
from toolserve.engine.base import Lora  # noqa: E402
from toolserve.models.files import bundled_model  # noqa: E402
from toolserve.types import SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--turns", default="1,8,32")
    args = ap.parse_args()
    model = bundled_model()
    tmp = Path(tempfile.mkdtemp(prefix="toolserve-bench-lora-"))
    one, two = (make_lora(model, tmp / f"{i}.gguf", i) for i in (1, 2))
    engine = engine_module.LlamaCppEngine(
        str(model), n_ctx=512, parallel=2, cache_ram_mb=0, n_threads=args.threads, adapters=[[Lora(str(one))], [Lora(str(two))]]
    )
    prompt = engine.tokenize("<|im_start|>user\nWrite a long story about the sea<|im_end|>\n<|im_start|>assistant\n")
    eog = [t for t in range(engine.info.n_vocab) if engine.token_piece(t) in (b"<|im_end|>", b"<|endoftext|>")]
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0, logit_bias=dict.fromkeys(eog, -100.0))

    async def stream(adapter: int) -> int:
        gen = engine.submit(prompt, params, adapter=adapter)
        return sum([1 async for _ in gen.events()])

    async def pair(sets: tuple[int, int]) -> float:
        started = time.perf_counter()
        produced = await asyncio.gather(*(stream(a) for a in sets))
        return sum(produced) / (time.perf_counter() - started)

    turns = [int(t) for t in args.turns.split(",")]
    results: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.runs):
        for turn in turns:
            scheduler_module.ADAPTER_TURN = turn
            for name, sets in (("same adapter", (0, 0)), ("two adapters", (0, 1))):
                results.setdefault((turn, name), []).append(asyncio.run(pair(sets)))
    engine.close()
    print(f"two concurrent streams of {args.tokens} tokens, greedy, {args.threads} threads; aggregate tok/s, median of {args.runs}")
    print("| steps per turn | same adapter | two adapters | ratio |")
    print("|---|---|---|---|")
    for turn in turns:
        same, mixed = (statistics.median(results[(turn, n)]) for n in ("same adapter", "two adapters"))
        print(f"| {turn} | {same:.1f} | {mixed:.1f} | {mixed / same:.2f} |")


if __name__ == "__main__":
    main()
