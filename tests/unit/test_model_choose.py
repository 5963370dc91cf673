"""Which files of a repo are fetched and loaded (models/choose.py), as llama-server's -hf does."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from toolserve.errors import ModelLoadError
from toolserve.models.choose import choose, choose_file, has_tag, models_in, quant_of

QWEN = [
    "README.md", ".gitattributes", "Qwen3-0.6B-Q2_K.gguf", "Qwen3-0.6B-Q4_K_M.gguf", "Qwen3-0.6B-Q4_K_S.gguf",
    "Qwen3-0.6B-Q8_0.gguf", "Qwen3-0.6B-UD-Q4_K_XL.gguf", "Qwen3-0.6B-BF16.gguf",
]
NO_DEFAULTS = ["a-IQ4_XS.gguf", "a-Q5_K_M.gguf", "mmproj-a-f16.gguf"]
SPLIT = ["big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf", "big-Q8_0.gguf"]
VISION = ["vl-Q4_K_M.gguf", "vl-Q8_0.gguf", "mmproj-vl-Q8_0.gguf", "mmproj-vl-F16.gguf", "mmproj-vl-F32.gguf"]
FOLDERS = ["Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf", "m-Q4_K_M.gguf", "sub/mmproj-m-f16.gguf", "mmproj-bf16.gguf"]


@pytest.mark.parametrize(
    ("names", "quant", "files", "mmproj", "tag"),
    [
        (QWEN, None, ("Qwen3-0.6B-Q4_K_M.gguf",), None, "Q4_K_M"),  # Q4_K_M first
        (QWEN, "q8_0", ("Qwen3-0.6B-Q8_0.gguf",), None, "Q8_0"),  # a tag in any case
        (QWEN, "Q4_K_S", ("Qwen3-0.6B-Q4_K_S.gguf",), None, "Q4_K_S"),
        (QWEN, "UD-Q4_K_XL", ("Qwen3-0.6B-UD-Q4_K_XL.gguf",), None, "UD-Q4_K_XL"),
        (QWEN, "BF16", ("Qwen3-0.6B-BF16.gguf",), None, "BF16"),
        ([n for n in QWEN if "Q4_K_M" not in n], None, ("Qwen3-0.6B-Q8_0.gguf",), None, "Q8_0"),  # then Q8_0
        (NO_DEFAULTS, None, ("a-IQ4_XS.gguf",), "mmproj-a-f16.gguf", None),  # then the first that is not a projector
        (SPLIT, None, ("big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf"), None, "Q4_K_M"),
        (SPLIT, "Q8_0", ("big-Q8_0.gguf",), None, "Q8_0"),
        (VISION, None, ("vl-Q4_K_M.gguf",), "mmproj-vl-F16.gguf", "Q4_K_M"),  # projector: F16 first
        (["m.gguf", "mmproj-m-Q8_0.gguf", "mmproj-m-F32.gguf"], None, ("m.gguf",), "mmproj-m-Q8_0.gguf", None),
        (FOLDERS, None, ("m-Q4_K_M.gguf",), "mmproj-bf16.gguf", "Q4_K_M"),  # the shortest name; the projector beside it
        (["m.GGUF", "notes.txt"], None, ("m.GGUF",), None, None),
    ],
)
def test_choice(names: list[str], quant: str | None, files: tuple[str, ...], mmproj: str | None, tag: str | None) -> None:
    got = choose(names, quant, "org/repo")
    assert (got.files, got.mmproj, got.quant) == (files, mmproj, tag)


@pytest.mark.parametrize(
    ("names", "quant", "needles"),
    [
        (QWEN, "Q5_K_M", ["org/repo has no GGUF tagged Q5_K_M", "it has BF16, Q2_K, Q4_K_M, Q4_K_S, Q8_0, UD-Q4_K_XL"]),
        (QWEN, "Q4_K", ["no GGUF tagged Q4_K"]),  # Q4_K is not Q4_K_M or Q4_K_S
        (["config.json", "model.safetensors", "README.md"], None, ["org/repo has no GGUF file", "config.json, model.safetensors", "base_model:quantized:org/repo"]),
        (["mmproj-only-f16.gguf"], None, ["has no GGUF file"]),
        ([], None, ["it holds no files"]),
        (["big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf"], None, ["lacks 1 of its 3 parts", "big-Q4_K_M-00002-of-00003.gguf"]),
    ],
)
def test_choice_errors(names: list[str], quant: str | None, needles: list[str]) -> None:
    with pytest.raises(ModelLoadError) as err:
        choose(names, quant, "org/repo")
    for needle in needles:
        assert needle in err.value.message
    assert "\n" not in err.value.message


@pytest.mark.parametrize(
    ("names", "file", "files", "mmproj"),
    [
        (VISION, "vl-Q8_0.gguf", ("vl-Q8_0.gguf",), "mmproj-vl-F16.gguf"),
        (SPLIT, "big-Q4_K_M-00002-of-00003.gguf", ("big-Q4_K_M-00001-of-00003.gguf", "big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00003-of-00003.gguf"), None),
        (VISION, "mmproj-vl-F32.gguf", ("mmproj-vl-F32.gguf",), None),
    ],
)
def test_a_named_file(names: list[str], file: str, files: tuple[str, ...], mmproj: str | None) -> None:
    got = choose_file(names, file, "org/repo")
    assert (got.files, got.mmproj) == (files, mmproj)


def test_a_named_file_that_is_not_there() -> None:
    with pytest.raises(ModelLoadError, match=r"org/repo has no file nope.gguf \(its GGUF models: vl-Q4_K_M.gguf, vl-Q8_0.gguf\)"):
        choose_file(VISION, "nope.gguf", "org/repo")


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("Qwen3-0.6B-Q4_K_M.gguf", "Q4_K_M"), ("x.q8_0.gguf", "Q8_0"), ("Llama-3.2-1B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("gemma-3-270m-it-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"), ("m-BF16-00001-of-00002.gguf", "BF16"), ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"), ("mmproj-model-f16.gguf", "F16"), ("model.gguf", None), ("Qwen2.5-7B.gguf", None),
    ],
)
def test_quant_of(name: str, tag: str | None) -> None:
    assert quant_of(name) == tag


@pytest.mark.parametrize(
    ("name", "tag", "expected"),
    [
        ("m-Q4_K_M.gguf", "Q4_K_M", True), ("m-Q4_K_M.gguf", "q4_k_m", True), ("m-Q4_K_M.gguf", "Q4_K", False),
        ("m-IQ4_NL.gguf", "Q4_NL", False), ("Q4_K_M/m-00001-of-00002.gguf", "Q4_K_M", True), ("m_Q8_0.gguf", "Q8_0", True),
        ("m-Q8_0-00001-of-00002.gguf", "Q8_0", True), ("m-Q8_0.gguf", "Q8", False),
    ],
)
def test_has_tag(name: str, tag: str, expected: bool) -> None:
    assert has_tag(name, tag) is expected


# random repos: some model files (some split), some projectors, some other files
_stem = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
_tag = st.sampled_from(["Q4_K_M", "Q8_0", "Q5_K_S", "IQ4_XS", "F16", "Q2_K"])


@st.composite
def repos(draw: st.DrawFn) -> list[str]:
    names: set[str] = set(draw(st.lists(st.sampled_from(["README.md", "config.json", "LICENSE"]), max_size=3)))
    for stem, tag in draw(st.lists(st.tuples(_stem, _tag), min_size=1, max_size=6)):
        parts = draw(st.integers(1, 3))
        if parts == 1:
            names.add(f"{stem}-{tag}.gguf")
        else:
            names.update(f"{stem}-{tag}-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1))
    for tag in draw(st.lists(_tag, max_size=2)):
        names.add(f"mmproj-{tag}.gguf")
    return draw(st.permutations(sorted(names)))


@given(repos())
@example(["ud-Q4_K_M.gguf"])  # found by CI: read as Unsloth's UD-Q4_K_M
def test_any_repo_gives_a_whole_model_and_never_a_projector(names: list[str]) -> None:
    got = choose(names, None, "org/repo")
    assert got.files and all(n in names for n in got.files)
    assert not any("mmproj" in n for n in got.files)
    if len(got.files) > 1:  # every part, in order, of one split model
        count = len(got.files)
        assert [f[-len("00001-of-00003.gguf"):] for f in got.files] == [f"{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    # Unsloth's dynamic quants carry the tag after `UD-` (a stem drawn as "ud" reads so too):
    # `x-UD-Q4_K_M.gguf` is a Q4_K_M file
    tags = {(quant_of(m) or "").removeprefix("UD-") for m in models_in(names)}
    expected = "Q4_K_M" if "Q4_K_M" in tags else "Q8_0" if "Q8_0" in tags else None
    assert got.quant == expected
    assert (got.mmproj is not None) == any("mmproj" in n for n in names)


@given(repos(), _tag)
def test_an_asked_tag_is_what_is_loaded_or_an_error(names: list[str], tag: str) -> None:
    try:
        got = choose(names, tag, "org/repo")
    except ModelLoadError as exc:
        assert not any(has_tag(m, tag) for m in models_in(names))
        assert f"no GGUF tagged {tag}" in exc.message
        return
    assert all(has_tag(f, tag) for f in got.files)
