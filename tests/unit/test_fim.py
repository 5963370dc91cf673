"""The fill-in-the-middle prompt layout (serving/fim.py), against llama-server's format_prompt_infill,
on a stand-in vocabulary whose tokens spell the text they stand for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.engine.base import FimTokens
from toolserve.serving.fim import Budget, ExtraChunk, layout

PRE, SUF, MID, REP, SEP, BOS = -1, -2, -3, -4, -5, -6
NAMES = {PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>", BOS: "<BOS>"}
QWEN = FimTokens(PRE, SUF, MID, REP, SEP)  # with repository tokens (Qwen2.5-Coder)
CODELLAMA = FimTokens(PRE, SUF, MID)  # without


def chars(text: str) -> list[int]:
    """One token per character: the layout is then readable back as text."""
    return [ord(c) for c in text]


def spelled(tokens: list[int]) -> str:
    return "".join(NAMES.get(t) or chr(t) for t in tokens)


@pytest.mark.parametrize(
    ("fim", "kwargs", "expected"),
    [
        # the file-level prompt (OpenAI's and Ollama's suffix)
        (QWEN, {"prefix": "def f(", "suffix": "):", "repository": False}, "<PRE>def f(<SUF>):<MID>"),
        (CODELLAMA, {"prefix": "a", "suffix": "b", "repository": False}, "<PRE>a<SUF>b<MID>"),
        # llama-server's /infill frame, even without extra chunks
        (QWEN, {"prefix": "a", "suffix": "b"}, "<REP>myproject\n<SEP>filename\n<PRE>a<SUF>b<MID>"),
        (CODELLAMA, {"prefix": "a", "suffix": "b"}, "<PRE>a<SUF>b<MID>"),
        # `prompt` (typed at the cursor) follows the prefix, as llama-server's code puts it
        (QWEN, {"prefix": "x = ", "suffix": "\n", "prompt": "1", "repository": False}, "<PRE>x = 1<SUF>\n<MID>"),
        # repository context: each file after a file separator, the current file last
        (QWEN, {"prefix": "p", "suffix": "s", "extra": [ExtraChunk("a.py", "A"), ExtraChunk("b.py", "B")]},
         "<REP>myproject\n<SEP>a.py\nA<SEP>b.py\nB<SEP>filename\n<PRE>p<SUF>s<MID>"),
        # chunks given make the frame whatever `repository` says
        (QWEN, {"prefix": "p", "suffix": "s", "extra": [ExtraChunk("a.py", "A")], "repository": False},
         "<REP>myproject\n<SEP>a.py\nA<SEP>filename\n<PRE>p<SUF>s<MID>"),
        # no file separator: llama-server's snippet separator before each chunk
        (CODELLAMA, {"prefix": "p", "suffix": "s", "extra": [ExtraChunk("a.py", "A")]}, "\n\n--- snippet ---\n\nA<PRE>p<SUF>s<MID>"),
        # a model that adds a BOS: first (llama-server puts the repository context before it)
        (CODELLAMA, {"prefix": "p", "suffix": "s", "bos": BOS, "extra": [ExtraChunk("f", "X")]}, "<BOS>\n\n--- snippet ---\n\nX<PRE>p<SUF>s<MID>"),
    ],
)
def test_layout(fim: FimTokens, kwargs: dict[str, object], expected: str) -> None:
    got = layout(fim, chars, **kwargs)  # type: ignore[arg-type]
    assert spelled(got.tokens) == expected and not got.truncated


def test_budget_trims_as_llama_server() -> None:
    budget = Budget(n_ctx=20, n_predict=2, batch=16)
    got = layout(CODELLAMA, chars, prefix="0123456789ABCDEF", suffix="abcdefgh", prompt="P", extra=[ExtraChunk("f", "xyz")], budget=budget)
    # prefix: last 12; suffix: first 16/4 - 2 - 1 = 1; extra: last 20 - 16 - 4 = 0
    assert spelled(got.tokens) == "<PRE>456789ABCDEFP<SUF>a<MID>" and got.truncated
    roomy = layout(CODELLAMA, chars, prefix="p", suffix="s", extra=[ExtraChunk("f", "xyz")], budget=Budget(100, 0, 16))
    assert spelled(roomy.tokens) == "\n\n--- snippet ---\n\nxyz<PRE>p<SUF>s<MID>" and not roomy.truncated


def test_budget_of_leaves_room_for_repository_context() -> None:
    assert Budget.of(8192, 128).batch == 2048  # llama-server's n_batch
    assert Budget.of(2048, 0).batch == 1024  # at most half the context


@given(prefix=st.text(max_size=40), suffix=st.text(max_size=40), prompt=st.text(max_size=10),
       files=st.lists(st.tuples(st.text(max_size=8), st.text(max_size=20)), max_size=3))
def test_every_part_is_in_place(prefix: str, suffix: str, prompt: str, files: list[tuple[str, str]]) -> None:
    """Untrimmed, the prompt is the parts in order: nothing lost, nothing added but the frame."""
    extra = [ExtraChunk(n, t) for n, t in files]
    got = spelled(layout(QWEN, chars, prefix=prefix, suffix=suffix, prompt=prompt, extra=extra).tokens)
    repo = "".join(f"<SEP>{n}\n{t}" for n, t in files)
    assert got == f"<REP>myproject\n{repo}<SEP>filename\n<PRE>{prefix}{prompt}<SUF>{suffix}<MID>"
