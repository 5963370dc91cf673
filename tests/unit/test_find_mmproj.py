"""The multimodal projector beside a model is found by name; an ambiguous folder finds none."""

from __future__ import annotations

from pathlib import Path

from toolserve.models.files import find_mmproj


def touch(folder: Path, *names: str) -> None:
    for n in names:
        (folder / n).write_bytes(b"GGUF")


def test_the_one_projector_beside_the_model(tmp_path: Path) -> None:
    touch(tmp_path, "Qwen2-VL-2B-Q4_K_M.gguf", "mmproj-Qwen2-VL-2B-f16.gguf")
    assert find_mmproj(tmp_path / "Qwen2-VL-2B-Q4_K_M.gguf") == str(tmp_path / "mmproj-Qwen2-VL-2B-f16.gguf")


def test_none_beside_a_text_model(tmp_path: Path) -> None:
    touch(tmp_path, "SmolLM2.gguf", "other.gguf")
    assert find_mmproj(tmp_path / "SmolLM2.gguf") is None


def test_several_projectors_pick_the_one_named_after_the_model(tmp_path: Path) -> None:
    touch(tmp_path, "gemma-3-4b-it.Q4_K_M.gguf", "qwen2-vl.gguf", "gemma-3-4b-it.mmproj.gguf", "qwen2-vl-mmproj.gguf")
    assert find_mmproj(tmp_path / "gemma-3-4b-it.Q4_K_M.gguf") == str(tmp_path / "gemma-3-4b-it.mmproj.gguf")


def test_ambiguous_projectors_pick_none(tmp_path: Path) -> None:
    touch(tmp_path, "model.gguf", "mmproj-a.gguf", "mmproj-b.gguf")
    assert find_mmproj(tmp_path / "model.gguf") is None
