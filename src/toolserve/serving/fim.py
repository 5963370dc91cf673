"""Fill-in-the-middle: a code model's prompt for the text between a prefix and a suffix, laid
out as llama.cpp's server lays it out (tools/server/server-common.cpp, format_prompt_infill), so
editors written for llama-server (llama.vim, llama.vscode) get the completions they expect.

With the repository tokens (`fim_rep`, `fim_sep`: Qwen2.5-Coder's <|repo_name|>, <|file_sep|>),
the repo-level pattern (arXiv 2409.12186):

    [FIM_REP]myproject\\n [FIM_SEP]{filename}\\n{text} ... [FIM_SEP]filename\\n
    [FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]

(llama-server's README puts `prompt` after FIM_MID; its code, followed here, after the prefix);
without them each extra chunk is introduced by "\\n\\n--- snippet ---\\n\\n". The prefix, the
suffix and the extra chunks are tokenized as plain text (no special tokens parsed out of code).
One departure: the model's BOS, where it wants one, opens the prompt; llama-server puts the
repository context before it.

Trimming (`Budget`), as llama-server does, for editors that send more than fits: the prefix
keeps its last 3/4 of a batch, the suffix its first 1/4 (less the prompt), the repository
context its last n_ctx - batch - 2 * n_predict tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolserve.engine.base import FimTokens
from toolserve.errors import Unsupported

SNIPPET = "\n\n--- snippet ---\n\n"  # llama-server's chunk separator for models without fim_sep
PROJECT = "myproject\n"  # llama-server's repository name (it takes none from the request)
CURRENT_FILE = "filename\n"  # and the current file's
LLAMA_SERVER_BATCH = 2048  # llama-server's default n_batch, which its trimming is relative to


@dataclass(frozen=True)
class ExtraChunk:
    """A piece of repository context: another file's name and (part of) its text."""

    filename: str
    text: str


@dataclass(frozen=True)
class Budget:
    """How much of each part may go in (llama-server's trimming). `batch`: the part of the
    context for the prefix and the suffix; the rest, less twice `n_predict`, for the extra chunks."""

    n_ctx: int
    n_predict: int
    batch: int

    @classmethod
    def of(cls, n_ctx: int, n_predict: int) -> Budget:
        # llama-server's n_batch, but at most half the context, so that repository context has
        # room on a small context too (llama-server at n_ctx = n_batch takes none)
        return cls(n_ctx, n_predict, min(LLAMA_SERVER_BATCH, n_ctx // 2))


@dataclass(frozen=True)
class FimPrompt:
    tokens: list[int]
    truncated: bool  # the budget cut something


def layout(
    fim: FimTokens,
    tokenize: Callable[[str], list[int]],
    *,
    prefix: str,
    suffix: str,
    prompt: str = "",
    extra: Sequence[ExtraChunk] = (),
    bos: int | None = None,
    budget: Budget | None = None,
    repository: bool = True,
) -> FimPrompt:
    """The prompt's tokens. `tokenize`: plain text to tokens (no BOS, no special tokens parsed);
    `bos`: the model's BOS when it adds one; `budget`: trim as llama-server does (None: whole).
    `repository`: the repo-level frame (llama-server writes it on /infill even with no extra
    chunks); without it and without chunks, the file-level prompt [FIM_PRE]..[FIM_SUF]..[FIM_MID]
    that Ollama's templates and OpenAI's `suffix` give."""
    extra_tokens: list[int] = []
    repository = repository or bool(extra)
    if fim.rep is not None and repository:
        extra_tokens += [fim.rep, *tokenize(PROJECT)]
    for chunk in extra:
        if fim.sep is not None:
            extra_tokens += [fim.sep, *tokenize(chunk.filename + "\n")]
        else:
            extra_tokens += tokenize(SNIPPET)
        extra_tokens += tokenize(chunk.text)
    if fim.sep is not None and repository:
        extra_tokens += [fim.sep, *tokenize(CURRENT_FILE)]

    before, after, typed = tokenize(prefix), tokenize(suffix), tokenize(prompt)
    cut = False
    if budget is not None:
        keep_before = min(len(before), 3 * (budget.batch // 4))
        keep_after = min(len(after), max(0, budget.batch // 4 - (2 + len(typed))))
        keep_extra = min(len(extra_tokens), max(0, budget.n_ctx - budget.batch - 2 * budget.n_predict))
        cut = (keep_before, keep_after, keep_extra) != (len(before), len(after), len(extra_tokens))
        before = before[len(before) - keep_before :]  # the prefix's end is next to the cursor
        after = after[:keep_after]
        extra_tokens = extra_tokens[len(extra_tokens) - keep_extra :]
    tokens = [*([bos] if bos is not None else []), *extra_tokens, fim.pre, *before, *typed, fim.suf, *after, fim.mid]
    return FimPrompt(tokens, cut)


def require(fim: FimTokens | None, model_id: str, param: str) -> FimTokens:
    """The model's FIM tokens, or the 400 that says it has none."""
    if fim is None:
        raise Unsupported(
            f"The model '{model_id}' cannot fill in the middle: its GGUF declares no fill-in-the-middle tokens "
            "(fim_pre, fim_suf, fim_mid). Serve a code model trained for it (Qwen2.5-Coder, CodeLlama, StarCoder2, "
            "CodeGemma, ...).",
            param=param,
        )
    return fim
