"""Layer placement: the settings' parsers, llama.cpp's layer-to-device rule, the fit, and the
settings reaching llama.cpp's model and context parameters (a spy at the engine's boundary)."""

from __future__ import annotations

from typing import Any

import gguf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.config import (
    ConfigError,
    ModelConfig,
    load_models_config,
    parse_gpu_layers,
    parse_main_gpu,
    parse_split_mode,
    parse_tensor_split,
)
from toolserve.engine import placement as pl
from toolserve.models.files import bundled_model, gguf_metadata, gguf_tensor_bytes
from toolserve.serving.placement import gguf_shape

GiB = 1024**3


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", "auto"), ("ALL", "all"), ("0", "0"), ("007", "7"), (33, "33"), (" 12 ", "12")],
)
def test_gpu_layers_accepted(value: object, expected: str) -> None:
    assert parse_gpu_layers(value) == expected


@pytest.mark.parametrize("value", ["-1", "lots", "1.5", "", True, "99%"])
def test_gpu_layers_refused(value: object) -> None:
    with pytest.raises(ValueError, match="number of layers, 'all' or 'auto'"):
        parse_gpu_layers(value)


@pytest.mark.parametrize(("value", "expected"), [("3,1", (3.0, 1.0)), ("1/1", (1.0, 1.0)), ([0, 2.5], (0.0, 2.5)), ("1", (1.0,))])
def test_tensor_split_accepted(value: object, expected: tuple[float, ...]) -> None:
    assert parse_tensor_split(value) == expected


@pytest.mark.parametrize("value", ["3,x", "0,0", "-1,2", "nan,1", "inf", ",".join(["1"] * 17), ""])
def test_tensor_split_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_tensor_split(value)


def test_main_gpu_and_split_mode() -> None:
    assert parse_main_gpu("2") == 2
    assert parse_split_mode("row") == "row"
    for bad in ("-1", "a", True):
        with pytest.raises(ValueError, match="GPU index"):
            parse_main_gpu(bad)
    with pytest.raises(ValueError, match="none, layer, row"):
        parse_split_mode("tensor")


def test_models_yaml_keys(tmp_path: Any) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - id: a\n    gpu_layers: 20\n    split_mode: none\n    main_gpu: 1\n    tensor_split: [3, 1]\n    no_kv_offload: true\n  - id: b\n")
    defaults = ModelConfig(gpu_layers="all", no_kv_offload=False)
    a, b = (e.local for e in load_models_config(str(path), defaults).models)
    assert a is not None and b is not None
    assert (a.gpu_layers, a.split_mode, a.main_gpu, a.tensor_split, a.no_kv_offload) == ("20", "none", 1, (3.0, 1.0), True)
    assert (b.gpu_layers, b.no_kv_offload) == ("all", False)  # the serve flags are the defaults


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("gpu_layers: many", "models[0].gpu_layers: 'many' is not a number of layers"),
        ("split_mode: tensor", "models[0].split_mode: 'tensor' is not one of none, layer, row"),
        ("tensor_split: [0, 0]", "models[0].tensor_split:"),
        ("main_gpu: -2", "models[0].main_gpu: -2 is not a GPU index"),
        ("no_kv_offload: 1", "models[0].no_kv_offload: expected true or false"),
    ],
)
def test_models_yaml_bad_values(tmp_path: Any, line: str, needle: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(f"models:\n  - id: a\n    {line}\n")
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_models_config(str(path))


# llama.cpp's rule (llama-model.cpp, load_tensors): the k-th of n offloaded layers goes to the
# first device whose cumulative share is above k / n
@pytest.mark.parametrize(
    ("n_layer", "ngl", "shares", "expected"),
    [
        (30, 31, [1.0], [31]),
        (30, 99, [1.0], [31]),  # capped at n_layer + 1
        (30, 31, [0.5, 0.5], [16, 15]),
        (30, 10, [0.5, 0.5], [5, 5]),
        (30, 31, [3.0, 1.0], [24, 7]),
        (30, 0, [0.5, 0.5], [0, 0]),
        (4, 5, [0.0, 1.0], [0, 5]),
        (30, 31, [], []),
    ],
)
def test_assign_layers(n_layer: int, ngl: int, shares: list[float], expected: list[int]) -> None:
    assert pl.assign_layers(n_layer, ngl, shares) == expected


def _dev(i: int, free_gib: float) -> pl.Device:
    return pl.Device(i, f"GPU{i}", "test", "gpu", int(free_gib * GiB), 2 * int(free_gib * GiB) + GiB)


def test_splits_follow_free_memory_unless_given() -> None:
    devs = [_dev(0, 3), _dev(1, 1)]
    assert pl.splits(devs, ()) == [0.75, 0.25]
    assert pl.splits(devs, (1.0, 1.0)) == [0.5, 0.5]
    assert pl.splits(devs, (2.0,)) == [1.0, 0.0]


COSTS = pl.LayerCosts(weights=(100, 100, 100, 100, 300), kv=(10, 10, 10, 10, 0), compute=50)


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        (0, 0),
        (349, 0),  # the output layer (300) + compute (50) is offloaded first
        (350, 1),
        (459, 1),
        (460, 2),
        (790, 5),
        (10**9, 5),
    ],
)
def test_fit_one_device(free: int, expected: int) -> None:
    assert pl.fit_layers(COSTS, [pl.Device(0, "GPU0", "t", "gpu", free, free)], [1.0], margin=0) == expected


@settings(deadline=None)
@given(
    weights=st.lists(st.integers(0, 10**9), min_size=2, max_size=40),
    kv=st.integers(0, 10**8),
    frees=st.lists(st.integers(0, 2 * 10**10), min_size=1, max_size=4),
    split=st.lists(st.floats(0, 10), min_size=0, max_size=4),
)
def test_fit_is_the_most_that_fits(weights: list[int], kv: int, frees: list[int], split: list[float]) -> None:
    costs = pl.LayerCosts(tuple(weights), tuple([kv] * (len(weights) - 1) + [0]), 10**6)
    devs = [pl.Device(i, f"GPU{i}", "t", "gpu", f, f) for i, f in enumerate(frees)]
    shares = pl.splits(devs, split)
    n = pl.fit_layers(costs, devs, shares, margin=GiB)

    def fits(k: int) -> bool:
        return all(need <= d.free - GiB for d, need in zip(devs, pl.needs(costs, k, shares), strict=True))

    assert 0 <= n <= len(weights)
    assert n == 0 or fits(n)
    assert n == len(weights) or not fits(n + 1)


def test_tensor_bytes_match_gguf_py() -> None:
    path = bundled_model()
    ours = gguf_tensor_bytes(path)
    theirs = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}
    assert set(ours) == set(theirs)
    for name, size in theirs.items():
        assert size <= ours[name] < size + 32, name  # ours include the alignment padding


def test_layer_costs_of_the_bundled_model() -> None:
    path = bundled_model()
    tensors: dict[str, int] = {}
    meta = gguf_metadata(path, tensors=tensors)
    shape = gguf_shape(meta, "f16", "f16")
    assert (shape.n_layer, shape.n_embd, shape.n_vocab) == (30, 576, 49152)
    # SmolLM2-135M: 3 KV heads of 64 dims, K and V in f16
    assert shape.kv_per_token == (3 * 64 * 2 * 2,) * 30
    costs = pl.layer_costs(shape, tensors, n_ctx_total=4096, n_ubatch=512, kv_offload=True)
    assert len(costs.weights) == 31
    assert sum(costs.weights[:30]) == sum(v for k, v in tensors.items() if k.startswith("blk."))
    # tied embeddings: the output layer is a copy of token_embd, plus output_norm
    assert costs.weights[30] == tensors["token_embd.weight"] + tensors["output_norm.weight"]
    assert costs.kv[:30] == (4096 * 768,) * 30 and costs.kv[30] == 0
    assert pl.layer_costs(shape, tensors, 4096, 512, kv_offload=False).kv == (0,) * 31


FAKE_GPUS = [pl.Device(0, "CUDA0", "Fake GPU A", "gpu", 8 * GiB, 16 * GiB), pl.Device(1, "CUDA1", "Fake GPU B", "gpu", 8 * GiB, 16 * GiB)]


@pytest.fixture()
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """llama.cpp's model and context loaders, recording the parameters they are called with (the
    loads below keep the engine in this process, engine_process=False, so the spy sees them);
    the placement module sees two fake GPUs (llama.cpp itself, a CPU build, sees none)."""
    import llama_cpp.llama_cpp as lib

    seen: dict[str, Any] = {}
    load, init = lib.llama_model_load_from_file, lib.llama_init_from_model

    def load_spy(path: bytes, params: Any) -> Any:
        seen["model"] = {
            "n_gpu_layers": params.n_gpu_layers,
            "main_gpu": params.main_gpu,
            "split_mode": params.split_mode,
            "tensor_split": [params.tensor_split[i] for i in range(2)] if params.tensor_split else None,
        }
        return load(path, params)

    def init_spy(model: Any, params: Any) -> Any:
        seen["context"] = {"offload_kqv": params.offload_kqv, "flash_attn_type": params.flash_attn_type}
        return init(model, params)

    monkeypatch.setattr(lib, "llama_model_load_from_file", load_spy)
    monkeypatch.setattr(lib, "llama_init_from_model", init_spy)
    monkeypatch.setattr(pl, "gpu_offload", lambda: True)
    monkeypatch.setattr(pl, "devices", lambda: list(FAKE_GPUS))
    return seen


@pytest.mark.parametrize(
    ("settings", "model", "offload_kqv"),
    [
        ({}, {"n_gpu_layers": 31, "main_gpu": 0, "split_mode": 1, "tensor_split": None}, True),  # auto: the tiny model fits
        (
            {"gpu_layers": "7", "split_mode": "row", "main_gpu": 1, "tensor_split": (3.0, 1.0), "no_kv_offload": True},
            {"n_gpu_layers": 7, "main_gpu": 1, "split_mode": 2, "tensor_split": [3.0, 1.0]},
            False,
        ),
        ({"gpu_layers": "all", "split_mode": "none"}, {"n_gpu_layers": 31, "main_gpu": 0, "split_mode": 0, "tensor_split": None}, True),
        ({"gpu_layers": "0"}, {"n_gpu_layers": 0, "main_gpu": 0, "split_mode": 1, "tensor_split": None}, True),
    ],
)
def test_settings_reach_llama_params(spy: dict[str, Any], settings: dict[str, Any], model: dict[str, Any], offload_kqv: bool) -> None:
    from toolserve.serving.loader import load_pipeline

    pipe = load_pipeline(ModelConfig(ctx_size=256, parallel=1, no_repack=True, engine_process=False, flash_attn="off", **settings))
    try:
        assert spy["model"] == model
        assert spy["context"]["offload_kqv"] is offload_kqv
        where = pipe.engine.info.placement
        assert where is not None and where.gpu_backend and where.n_layers == 31
        assert where.gpu_layers == model["n_gpu_layers"]
        used = [d for d in where.devices if d.layers]
        assert sum(d.layers for d in where.devices) == where.gpu_layers
        if not settings:  # two equal GPUs share the 31 layers as llama.cpp splits them; the fakes' memory never drops
            assert where.summary() == "31 of 31 layers on CUDA0 (Fake GPU A) 16 layers, 0 MiB, CUDA1 (Fake GPU B) 15 layers, 0 MiB (auto: all fit)"
        if settings.get("split_mode") == "none":
            assert [d.name for d in where.devices] == ["CUDA0"]
        if settings.get("tensor_split") == (3.0, 1.0):
            assert [d.layers for d in used] == [6, 1]  # 7 layers cut at 3:1, as llama.cpp does
    finally:
        pipe.engine.close()


def test_too_many_layers_refused_naming_the_memory(spy: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from toolserve.errors import ModelLoadError
    from toolserve.serving.loader import load_pipeline

    small = [pl.Device(0, "CUDA0", "Fake GPU", "gpu", 20 * 1024 * 1024, 16 * GiB)]  # 20 MiB free
    monkeypatch.setattr(pl, "devices", lambda: small)
    with pytest.raises(ModelLoadError, match=r"--gpu-layers all: 31 layers need about \d+ MiB on CUDA0 \(Fake GPU\), which has 20 MiB free; 0 fit there"):
        load_pipeline(ModelConfig(ctx_size=256, parallel=1, no_repack=True, engine_process=False, gpu_layers="all"))
    assert "model" not in spy  # refused before llama.cpp was asked


def test_auto_places_what_fits(spy: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from toolserve.serving.loader import load_pipeline

    # room for the output layer and some blocks, not all, beside the 1 GiB margin
    small = [pl.Device(0, "CUDA0", "Fake GPU", "gpu", GiB + 180 * 1024 * 1024, 16 * GiB)]
    monkeypatch.setattr(pl, "devices", lambda: small)
    pipe = load_pipeline(ModelConfig(ctx_size=256, parallel=1, no_repack=True, engine_process=False))
    try:
        n = spy["model"]["n_gpu_layers"]
        assert 0 < n < 31
        assert pipe.engine.info.placement is not None and pipe.engine.info.placement.chosen == f"auto: {n} of 31 fit"
        assert f"auto placement: {n} of 31 layers fit on the GPU" in caplog.text
    finally:
        pipe.engine.close()


def test_main_gpu_out_of_range(spy: dict[str, Any]) -> None:
    from toolserve.errors import ModelLoadError
    from toolserve.serving.loader import load_pipeline

    with pytest.raises(ModelLoadError, match=r"--main-gpu 2: there is no such GPU \(found 0: CUDA0 \(Fake GPU A\), 1: CUDA1"):
        load_pipeline(ModelConfig(ctx_size=256, parallel=1, no_repack=True, engine_process=False, split_mode="none", main_gpu=2))
