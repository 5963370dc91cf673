"""`toolserve run` and `toolserve chat`: a model answering on the terminal, in this process."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys

from toolserve.config import ModelConfig
from toolserve.errors import ToolserveError
from toolserve.serving.pipeline import Finish, Pipeline
from toolserve.types import Message, SamplingParams


async def _answer(pipe: Pipeline, history: list[Message], params: SamplingParams, out: object) -> str:
    prompt = pipe.tokenize_prompt(pipe.render_chat(history))
    params = pipe.fit(prompt, params, param="messages")
    text = []
    async for item in pipe.generate(prompt, params):
        if isinstance(item, Finish):
            break
        text.append(item.text)
        out.write(item.text)  # type: ignore[attr-defined]
        out.flush()  # type: ignore[attr-defined]
    out.write("\n")  # type: ignore[attr-defined]
    return "".join(text)


def _one_at_a_time(cfg: ModelConfig) -> ModelConfig:
    """run and chat answer one prompt at a time: one sequence, unless --parallel says otherwise;
    the engine runs in the command's own process."""
    return dataclasses.replace(cfg, parallel=cfg.parallel or 1, engine_process=False)


def run(args: argparse.Namespace, cfg: ModelConfig) -> int:
    """`toolserve run PROMPT`: one answer, printed as it comes."""
    from toolserve.serving.loader import load_pipeline

    pipe = load_pipeline(_one_at_a_time(cfg))
    history = [Message("system", args.system)] if args.system else []
    history.append(Message("user", args.prompt))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    try:
        asyncio.run(_answer(pipe, history, params, sys.stdout))
    finally:
        pipe.engine.close()
    return 0


def chat(args: argparse.Namespace, cfg: ModelConfig) -> int:
    """`toolserve chat`: a conversation on the terminal, one line a turn."""
    from toolserve.serving.conversation import fill_sampling
    from toolserve.serving.loader import load_pipeline

    pipe = load_pipeline(_one_at_a_time(cfg))
    history = [Message("system", args.system)] if args.system else []
    params = SamplingParams(max_tokens=args.max_tokens)  # the model's own sampling, but for --temperature
    sent = frozenset() if args.temperature is None else frozenset({"temperature"})
    params = fill_sampling(dataclasses.replace(params, temperature=1.0 if args.temperature is None else args.temperature), pipe.sampling_fill(), sent)
    print(f"toolserve chat with {pipe.model_id}. Empty line or Ctrl-D to quit.", file=sys.stderr)

    async def loop() -> None:
        while True:
            try:
                line = await asyncio.to_thread(input, "> ")
            except EOFError:
                return
            if not line.strip():
                return
            history.append(Message("user", line))
            try:
                reply = await _answer(pipe, history, params, sys.stdout)
            except ToolserveError as exc:
                print(f"error: {exc.message}", file=sys.stderr)
                history.pop()
                continue
            history.append(Message("assistant", reply))

    try:
        asyncio.run(loop())
    finally:
        pipe.engine.close()
    return 0
