"""Ollama's manifests and LM Studio's folder, read in place (models/ollama.py, models/lmstudio.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolserve.errors import ModelLoadError
from toolserve.models import lmstudio, ollama
from toolserve.models.refs import LmStudioModel, OllamaModel, parse

GGUF = b"GGUF" + bytes(60)


def layer(kind: str, digest: str) -> dict[str, Any]:
    return {"mediaType": f"application/vnd.ollama.image.{kind}", "digest": digest, "size": 1}


def store(root: Path, name: tuple[str, str, str, str], layers: list[dict[str, Any]], blobs: dict[str, bytes]) -> None:
    manifest = root / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    (root / "blobs").mkdir(exist_ok=True)
    for digest, data in blobs.items():
        (root / "blobs" / digest.replace(":", "-")).write_bytes(data)


@pytest.mark.parametrize(
    ("layers", "blobs", "model", "projector", "params", "adapters"),
    [
        ([layer("model", "sha256:aa")], {"sha256:aa": GGUF}, "sha256-aa", None, {}, 0),
        (
            [layer("model", "sha256:aa"), layer("projector", "sha256:bb"), layer("template", "sha256:cc"), layer("params", "sha256:dd")],
            {"sha256:aa": GGUF, "sha256:bb": GGUF, "sha256:dd": json.dumps({"temperature": 0.6, "top_k": 20, "repeat_penalty": 1.1, "stop": ["<|im_end|>"], "num_ctx": 8192}).encode()},
            "sha256-aa", "sha256-bb", {"temperature": 0.6, "top_k": 20.0, "repetition_penalty": 1.1}, 0,
        ),
        ([layer("model", "sha256:aa"), layer("adapter", "sha256:ee")], {"sha256:aa": GGUF}, "sha256-aa", None, {}, 1),
        ([layer("model", "sha256:aa"), layer("params", "sha256:dd")], {"sha256:aa": GGUF, "sha256:dd": b"not json"}, "sha256-aa", None, {}, 0),
    ],
)
def test_manifest_layers(tmp_path: Path, layers: list[dict[str, Any]], blobs: dict[str, bytes], model: str, projector: str | None, params: dict[str, float], adapters: int) -> None:
    store(tmp_path, ("registry.ollama.ai", "library", "m", "latest"), layers, blobs)
    data = json.loads((tmp_path / "manifests/registry.ollama.ai/library/m/latest").read_text())
    got = ollama.read_manifest(tmp_path, data, "m")
    assert got.model == tmp_path / "blobs" / model
    assert got.projector == (tmp_path / "blobs" / projector if projector else None)
    assert (got.params, got.adapters) == (params, adapters)


@pytest.mark.parametrize("data", [{}, {"layers": "x"}, {"layers": [layer("template", "sha256:cc")]}, []])
def test_not_a_manifest(tmp_path: Path, data: Any) -> None:
    with pytest.raises(ModelLoadError):
        ollama.read_manifest(tmp_path, data, "m")


def test_resolve_in_the_store_named_by_OLLAMA_MODELS(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path))
    store(tmp_path, ("registry.ollama.ai", "library", "qwen3", "0.6b"), [layer("model", "sha256:aa")], {"sha256:aa": GGUF})
    store(tmp_path, ("hf.co", "bartowski", "x-gguf", "Q4_K_M"), [layer("model", "sha256:ff")], {"sha256:ff": b"safetensors..."})
    ref = parse("ollama:Qwen3:0.6B")  # Ollama matches names whatever their case
    assert isinstance(ref, OllamaModel)
    assert ollama.resolve(ref).model == tmp_path / "blobs" / "sha256-aa"
    assert [r.name for r, _ in ollama.entries()] == ["hf.co/bartowski/x-gguf:Q4_K_M", "qwen3:0.6b"]
    with pytest.raises(ModelLoadError, match=r"ollama:qwen3:latest is not in Ollama's store .* \(it holds hf.co/bartowski/x-gguf:Q4_K_M, qwen3:0.6b\); `ollama pull qwen3:latest`"):
        ollama.resolve(parse("ollama:qwen3"))  # type: ignore[arg-type]
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        ollama.resolve(parse("ollama:hf.co/bartowski/x-gguf:Q4_K_M"))  # type: ignore[arg-type]


def test_the_store_defaults_to_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ollama.store() == tmp_path / ".ollama" / "models"


@pytest.mark.parametrize(
    ("pointer", "settings", "explicit", "legacy", "expected"),
    [
        (None, None, None, False, ".lmstudio/models"),
        ("elsewhere/lms", None, None, False, "elsewhere/lms/models"),  # ~/.lmstudio-home-pointer moves LM Studio's home
        (None, {"downloadsFolder": "{tmp}/big-disk/models"}, None, False, "big-disk/models"),  # its own setting
        (None, {"downloadsFolder": ""}, None, False, ".lmstudio/models"),
        (None, None, None, True, ".cache/lm-studio/models"),  # LM Studio before 0.3, when only that exists
        (None, {"downloadsFolder": "{tmp}/big-disk/models"}, "{tmp}/mine", False, "mine"),  # TOOLSERVE_LMSTUDIO_MODELS first
    ],
)
def test_lm_studio_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pointer: str | None, settings: dict[str, str] | None, explicit: str | None, legacy: bool, expected: str
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TOOLSERVE_LMSTUDIO_MODELS", raising=False)
    home = tmp_path / ".lmstudio"
    if pointer:
        home = tmp_path / pointer
        (tmp_path / ".lmstudio-home-pointer").write_text(str(home) + "\n")
    if settings is not None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps({k: v.format(tmp=tmp_path) for k, v in settings.items()}))
    if legacy:
        (tmp_path / ".cache" / "lm-studio" / "models").mkdir(parents=True)
    if explicit:
        monkeypatch.setenv("TOOLSERVE_LMSTUDIO_MODELS", explicit.format(tmp=tmp_path))
    assert lmstudio.folder() == tmp_path / expected


def test_lm_studio_repos_and_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSERVE_LMSTUDIO_MODELS", str(tmp_path))
    vl = tmp_path / "lmstudio-community" / "vl-GGUF"
    vl.mkdir(parents=True)
    for name in ("vl-Q4_K_M.gguf", "vl-Q8_0.gguf", "mmproj-vl-F16.gguf"):
        (vl / name).write_bytes(GGUF)
    (tmp_path / "someone" / "empty").mkdir(parents=True)
    assert [r.repo for r in lmstudio.repos()] == ["lmstudio-community/vl-GGUF"]
    folder, choice = lmstudio.resolve(LmStudioModel("lmstudio-community/vl-GGUF"))
    assert (folder, choice.files, choice.mmproj) == (vl, ("vl-Q4_K_M.gguf",), "mmproj-vl-F16.gguf")
    _, choice = lmstudio.resolve(LmStudioModel("lmstudio-community/vl-GGUF", "vl-Q8_0.gguf"))
    assert choice.files == ("vl-Q8_0.gguf",)
    with pytest.raises(ModelLoadError, match=r"lmstudio:someone/missing is not in LM Studio's models folder .*it holds lmstudio-community/vl-GGUF"):
        lmstudio.resolve(LmStudioModel("someone/missing"))
