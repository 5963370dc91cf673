"""How large a context the agent gets, and whether it runs with its own prompt and tools (full)
or a short prompt and few tools (lean). Pure: sizes in, a Fit or a message that says what to
pass out."""

from __future__ import annotations

from dataclasses import dataclass

from toolserve.errors import ToolserveError
from toolserve.launch.agents import Agent


class DoesNotFit(ToolserveError):
    """The context cannot hold the agent's prompt: the message says what to pass instead."""


@dataclass(frozen=True)
class Fit:
    ctx_size: int
    lean: bool
    note: str | None = None  # a line for the user: why lean, or a context past the trained one


def fit(
    agent: Agent, model: str, *, prompt: str = "auto", trained: int | None = None, ctx_flag: int | None = None,
    served: int | None = None, url: str | None = None,
) -> Fit:
    """`trained`: the model's n_ctx_train; `ctx_flag`: --ctx-size; `served`: the context of a
    server already running at `url` (then the other two do not count)."""
    full, lean = agent.min_ctx(False), agent.min_ctx(True)
    if served is not None:
        ctx, where = served, f"the server at {url} gives {model} a context of {served:,} tokens"
    elif ctx_flag is not None:
        ctx, where = ctx_flag, f"--ctx-size {ctx_flag}"
    else:
        ctx = min(agent.preferred_ctx, trained or agent.preferred_ctx)
        where = f"{model} was trained on a context of {ctx:,} tokens"
    fix = (
        "restart it with --ctx-size {need} (or leave out --url: launch starts a server that fits)" if served is not None
        else "pass --model with a longer context" + (", or a larger --ctx-size" if ctx_flag is not None else "")
    )
    if prompt == "full" or (prompt == "auto" and ctx >= full):
        if ctx < full:
            raise DoesNotFit(
                f"{where}; {agent.title}'s own prompt and tools take about {agent.full_tokens:,} and it needs "
                f"{full:,}. Pass --prompt lean (a short prompt and {agent.lean_tools}), or {fix.format(need=full)}."
            )
        return Fit(ctx, False, _past_training(ctx, trained, served))
    if ctx < lean:
        raise DoesNotFit(
            f"{where}; {agent.title} needs {lean:,} even with a short prompt and {agent.lean_tools} "
            f"(its own prompt and tools: {full:,}). {_upper(fix.format(need=lean))}."
        )
    note = None
    if prompt == "auto":
        note = (
            f"{where}, too few for {agent.title}'s own prompt and tools (about {agent.full_tokens:,}): it runs "
            f"with a short prompt and {agent.lean_tools}. For the full agent: a model with a context of {full:,} or more."
        )
    return Fit(ctx, True, " ".join(n for n in (note, _past_training(ctx, trained, served)) if n) or None)


def _past_training(ctx: int, trained: int | None, served: int | None) -> str | None:
    if served is None and trained and ctx > trained:
        return f"--ctx-size {ctx} is past the {trained:,} tokens the model was trained on: it may degrade there."
    return None


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]
