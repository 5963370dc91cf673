"""Model references (models/refs.py): what `--model` and models.yaml's `model:` name."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve.errors import ModelLoadError
from toolserve.models.refs import (
    Bundled,
    HubFile,
    HubRepo,
    LmStudioModel,
    LocalFile,
    OllamaModel,
    canonical,
    is_reference,
    model_stem,
    parse,
    short_name,
)

CASES = [
    # spec, parsed, served id, canonical form
    ("bartowski/Qwen2.5-0.5B-Instruct-GGUF", HubRepo("bartowski/Qwen2.5-0.5B-Instruct-GGUF"), "Qwen2.5-0.5B-Instruct", "bartowski/Qwen2.5-0.5B-Instruct-GGUF"),
    ("bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q8_0", HubRepo("bartowski/Qwen2.5-0.5B-Instruct-GGUF", "Q8_0"), "Qwen2.5-0.5B-Instruct:Q8_0", "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"),
    ("unsloth/gemma-3-270m-it-gguf:UD-Q4_K_XL", HubRepo("unsloth/gemma-3-270m-it-gguf", "UD-Q4_K_XL"), "gemma-3-270m-it:UD-Q4_K_XL", "unsloth/gemma-3-270m-it-gguf:UD-Q4_K_XL"),
    ("org/plain", HubRepo("org/plain"), "plain", "org/plain"),
    ("hf://org/repo-GGUF/model-Q4_K_M.gguf", HubFile("org/repo-GGUF", "model-Q4_K_M.gguf"), "model-Q4_K_M", "hf://org/repo-GGUF/model-Q4_K_M.gguf"),
    ("hf://org/repo/sub/model-Q8_0-00001-of-00003.gguf", HubFile("org/repo", "sub/model-Q8_0-00001-of-00003.gguf"), "model-Q8_0", "hf://org/repo/sub/model-Q8_0-00001-of-00003.gguf"),
    ("hf://org/repo-GGUF:Q4_K_M", HubRepo("org/repo-GGUF", "Q4_K_M"), "repo:Q4_K_M", "org/repo-GGUF:Q4_K_M"),
    ("https://huggingface.co/org/repo-GGUF", HubRepo("org/repo-GGUF"), "repo", "org/repo-GGUF"),
    ("https://huggingface.co/org/repo-GGUF/blob/main/m-Q4_K_M.gguf", HubFile("org/repo-GGUF", "m-Q4_K_M.gguf"), "m-Q4_K_M", "hf://org/repo-GGUF/m-Q4_K_M.gguf"),
    ("https://hf.co/org/repo/resolve/main/sub/m.gguf?download=true", HubFile("org/repo", "sub/m.gguf"), "m", "hf://org/repo/sub/m.gguf"),
    ("ollama:qwen3", OllamaModel("registry.ollama.ai", "library", "qwen3", "latest", False), "qwen3", "ollama:qwen3:latest"),
    ("ollama:qwen3:0.6b", OllamaModel("registry.ollama.ai", "library", "qwen3", "0.6b", True), "qwen3:0.6b", "ollama:qwen3:0.6b"),
    ("ollama:someone/tuned:v2", OllamaModel("registry.ollama.ai", "someone", "tuned", "v2", True), "tuned:v2", "ollama:someone/tuned:v2"),
    ("ollama:hf.co/bartowski/x-GGUF:Q4_K_M", OllamaModel("hf.co", "bartowski", "x-GGUF", "Q4_K_M", True), "x-GGUF:Q4_K_M", "ollama:hf.co/bartowski/x-GGUF:Q4_K_M"),
    ("lmstudio:lmstudio-community/Qwen3-4B-GGUF", LmStudioModel("lmstudio-community/Qwen3-4B-GGUF"), "Qwen3-4B", "lmstudio:lmstudio-community/Qwen3-4B-GGUF"),
    ("lmstudio:lmstudio-community/Qwen3-4B-GGUF:Q8_0", LmStudioModel("lmstudio-community/Qwen3-4B-GGUF", None, "Q8_0"), "Qwen3-4B:Q8_0", "lmstudio:lmstudio-community/Qwen3-4B-GGUF:Q8_0"),
    ("lmstudio:a/b/Qwen3-4B-Q4_K_M.gguf", LmStudioModel("a/b", "Qwen3-4B-Q4_K_M.gguf"), "Qwen3-4B-Q4_K_M", "lmstudio:a/b/Qwen3-4B-Q4_K_M.gguf"),
    ("bundled", Bundled(), "SmolLM2-135M-Instruct.Q4_1", "bundled"),
    ("/nowhere/model.gguf", LocalFile("/nowhere/model.gguf"), "model", "/nowhere/model.gguf"),
    ("org/model.gguf", LocalFile("org/model.gguf"), "model", "org/model.gguf"),  # a .gguf is a path, not a repo
    ("some/deeper/path", LocalFile("some/deeper/path"), "path", "some/deeper/path"),
]


@pytest.mark.parametrize(("spec", "parsed", "name", "written"), CASES)
def test_references(spec: str, parsed: object, name: str, written: str) -> None:
    ref = parse(spec)
    assert ref == parsed
    assert short_name(ref) == name
    assert canonical(ref) == written
    assert is_reference(ref) == (not isinstance(parsed, LocalFile | Bundled))


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("hf://org/repo/README.md", "hf://owner/repo/FILE.gguf"),
        ("hf://org", "hf://owner/repo/FILE.gguf"),
        ("ollama:", "ollama:NAME[:TAG]"),
        ("ollama:a/b/c/d", "ollama:NAME[:TAG]"),
        ("ollama:bad name", "ollama:NAME[:TAG]"),
        ("lmstudio:onlyowner", "lmstudio:owner/repo"),
        ("https://huggingface.co/org/repo/tree/main", "Hugging Face repo or GGUF file URL"),
        ("  ", "a GGUF path or a model reference"),
    ],
)
def test_malformed_references_say_what_is_expected(spec: str, needle: str) -> None:
    with pytest.raises(ModelLoadError) as err:
        parse(spec)
    assert needle in err.value.message
    assert "\n" not in err.value.message


def test_an_existing_path_wins_over_a_repo(tmp_path: Path) -> None:
    (tmp_path / "org" / "repo").mkdir(parents=True)
    assert parse("org/repo", tmp_path) == LocalFile(str(tmp_path / "org" / "repo"))
    assert parse("org/other", tmp_path) == HubRepo("org/other")
    assert parse("rel.gguf", tmp_path) == LocalFile(str(tmp_path / "rel.gguf"))


@pytest.mark.parametrize(
    ("file", "stem"),
    [("a/b/Model-Q4_K_M.gguf", "Model-Q4_K_M"), ("M-Q8_0-00002-of-00004.gguf", "M-Q8_0"), ("x.GGUF", "x"), ("noext", "noext")],
)
def test_model_stem(file: str, stem: str) -> None:
    assert model_stem(file) == stem


name = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True).filter(lambda s: not s.lower().endswith(".gguf"))
quant = st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,10}", fullmatch=True)


@given(name, name, quant)
def test_every_repo_reference_reads_back_as_written(owner: str, repo: str, q: str | None) -> None:
    spec = f"{owner}/{repo}" + (f":{q}" if q else "")
    ref = parse(spec, Path("/nonexistent-base"))
    assert ref == HubRepo(f"{owner}/{repo}", q)
    assert parse(canonical(ref), Path("/nonexistent-base")) == ref
    assert ":" not in short_name(ref) or q is not None


@given(name, st.none() | name)
def test_every_ollama_reference_reads_back(model: str, tag: str | None) -> None:
    ref = parse(f"ollama:{model}" + (f":{tag}" if tag else ""))
    assert isinstance(ref, OllamaModel)
    assert (ref.model, ref.tag) == (model, tag or "latest")
    again = parse(canonical(ref))
    assert isinstance(again, OllamaModel) and (again.host, again.namespace, again.model, again.tag) == (ref.host, ref.namespace, ref.model, ref.tag)
