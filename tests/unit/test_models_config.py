"""--config files, the memory estimate, routing by model, and how upstream errors are read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolserve.config import ConfigError, ModelConfig, auto_parallel, load_models_config
from toolserve.errors import InsufficientMemory, ModelLoadError, ModelNotFound
from toolserve.models.files import bundled_model, gguf_metadata
from toolserve.serving.entries import LocalModel
from toolserve.serving.memory import MB, memory_estimate
from toolserve.serving.registry import ModelRegistry
from toolserve.upstream.client import error_from_body, root_url, safe_url


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "models.yaml"
    p.write_text(text)
    return str(p)


def test_a_full_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_KEY", "secret")
    path = write(tmp_path, """
memory_mb: 2048
keep_alive: 60
default: big
models:
  - id: small
    ctx_size: 1024
    chat_template: templates/mine.jinja
  - model: weights/other.gguf
    keep_alive: null
    preload: true
    mmproj: weights/other-mmproj.gguf
    no_repack: true
    embeddings: true
  - id: big
    url: https://gpu-box:8000/v1
    api_key_env: VLLM_KEY
    upstream_model: meta-llama/Llama-3.3-70B-Instruct
    mode: raw
    guided: vllm
    timeout: 30
    verify_tls: ca.pem
    tool_format: llama3_json
""")
    mc = load_models_config(path, ModelConfig(threads=3, cache_ram=64))
    assert [e.id for e in mc.models] == ["small", "other", "big"]
    assert (mc.default, mc.memory_mb) == ("big", 2048)
    small, other, big = mc.models
    assert small.local is not None and small.local.model is None  # the bundled model
    assert small.local.ctx_size == 1024 and small.local.threads == 3 and small.local.cache_ram == 64  # flags as defaults
    assert small.local.chat_template == str(tmp_path / "templates/mine.jinja")  # relative to the file
    assert small.keep_alive == 60 and not small.preload
    assert other.local is not None and other.local.model == str(tmp_path / "weights/other.gguf")
    assert other.keep_alive is None and other.preload
    assert other.local.mmproj == str(tmp_path / "weights/other-mmproj.gguf")
    assert other.local.no_repack and not small.local.no_repack
    assert other.local.embeddings and not small.local.embeddings
    assert load_models_config(path, ModelConfig(no_repack=True)).models[0].local.no_repack  # type: ignore[union-attr]  # the flag as default
    up = big.upstream
    assert up is not None and big.local is None
    assert (up.api_key, up.mode, up.guided, up.timeout, up.tool_format) == ("secret", "raw", "vllm", 30.0, "llama3_json")
    assert up.verify_tls == str(tmp_path / "ca.pem")
    assert up.urls == ("https://gpu-box:8000/v1",)


def test_an_upstream_entry_may_list_several_servers(tmp_path: Path) -> None:
    path = write(tmp_path, "models:\n  - id: q\n    url: [http://a:8000, http://b:8000/v1]\n")
    (entry,) = load_models_config(path).models
    assert entry.upstream is not None and entry.upstream.urls == ("http://a:8000", "http://b:8000/v1")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models: []", "non-empty list"),
        ("models:\n  - ctx: 10", "unknown key 'ctx' for a local model"),
        ("models:\n  - url: http://x\n    upstream_model: m\n    mode: fast", "'fast' is not one of passthrough, raw"),
        ("models:\n  - url: http://x\n    upstream_model: m\n    guided: xgrammar", "guided"),
        ("models:\n  - url: http://x", "needs 'id' or 'upstream_model'"),
        ("models:\n  - url: ftp://x\n    id: a", "not an http"),
        ("models:\n  - url: [http://x, ftp://y]\n    id: a", "models[0].url[1]: 'ftp://y' is not an http"),
        ("models:\n  - url: [http://x, http://x]\n    id: a", "models[0].url: a URL is listed twice"),
        ("models:\n  - url: 8000\n    id: a", "models[0].url: 8000 is not an http"),
        ("models:\n  - id: a\n  - id: a", "used twice"),
        ("models:\n  - id: a\ndefault: b", "default 'b'"),
        ("models:\n  - id: a\n    ctx_size: big", "models[0].ctx_size: expected an integer"),
        ("models:\n  - id: a\n    cache_type_k: q3", "cache_type_k"),
        ("models:\n  - id: a\n    no_repack: yes please", "models[0].no_repack: expected true or false"),
        ("models:\n  - id: a\n    embeddings: 1", "models[0].embeddings: expected true or false"),
        ("models:\n  - id: a\n    lora: x.gguf", "models[0].lora: expected a list of adapter paths"),
        ("models:\n  - id: a\n    lora: [{path: x.gguf, scale: big}]", "models[0].lora[0].scale: expected a number"),
        ("models:\n  - id: a\n    lora: [{file: x.gguf}]", "models[0].lora[0]: expected PATH[:SCALE] or {path: ..., scale: ...}"),
        ("models:\n  - id: a\n    lora_models: [x.gguf]", "models[0].lora_models: expected a mapping"),
        ("models:\n  - id: a\n    lora_models: {a: x.gguf}", "the id 'a' is used twice"),
        ("models:\n  - id: a\n    lora_models: {t: x.gguf}\n  - id: t", "the id 't' is used twice"),
        ("models:\n  - url: http://x\n    id: a\n    api_key_env: NO_SUCH_VARIABLE_HERE", "NO_SUCH_VARIABLE_HERE is not set"),
        ("modles: []", "unknown key 'modles'"),
        ("models: [", "not valid YAML"),
    ],
)
def test_errors_name_the_place(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_models_config(write(tmp_path, text))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_memory_estimate_from_the_gguf_header() -> None:
    meta = gguf_metadata(bundled_model())
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 30
    assert not any(k.startswith("tokenizer.") for k in meta)  # the vocabulary is skipped
    cfg = ModelConfig(ctx_size=1024, cache_ram=32, parallel=1)
    kv = 30 * 3 * (64 + 64) * 2 * 1024  # layers x kv heads x (k + v head size) x f16 x context
    assert memory_estimate(cfg) == bundled_model().stat().st_size + kv + 32 * MB
    auto = memory_estimate(ModelConfig(ctx_size=1024, cache_ram=32))  # --parallel auto: 8 sequences of 1024
    assert auto == bundled_model().stat().st_size + 8 * kv + 32 * MB
    two = memory_estimate(ModelConfig(ctx_size=1024, cache_ram=32, parallel=2, cache_type_k="q8_0", cache_type_v="q8_0"))
    assert two == bundled_model().stat().st_size + int(30 * 3 * 128 * 34 / 32 * 1024) * 2 + 32 * MB


def test_routing_by_model() -> None:
    reg = ModelRegistry([LocalModel("a", ModelConfig()), LocalModel("b", ModelConfig())], default="b")
    assert reg.resolve(None).model_id == "b" and reg.resolve("a").model_id == "a"
    with pytest.raises(ModelNotFound) as err:
        reg.resolve("c")
    assert err.value.message == (
        "The model 'c' does not exist; this server serves 'a', 'b'. To serve other names with one of them, "
        "start it with --model-map 'c-*=a' (models.yaml: model_map)."
    )
    mapped = ModelRegistry(reg.local, default="b", model_map=[("claude-*haiku*", "a"), ("claude-*", "b"), ("gpt-?", "nope")])
    assert mapped.resolve("claude-3-5-haiku-20241022").model_id == "a"  # the first pattern that matches
    assert mapped.resolve("claude-sonnet-4-5").model_id == "b"
    assert mapped.resolve("a").model_id == "a"  # a served id is never remapped
    with pytest.raises(ModelNotFound, match="mapped to 'nope', which is not served"):
        mapped.resolve("gpt-5")
    with pytest.raises(ModelNotFound, match="does not exist"):
        mapped.resolve("Claude-x")  # patterns are case-sensitive
    assert all(isinstance(m, LocalModel) and m.estimate > 0 and m.state == "unloaded" for m in reg.local)


def test_a_model_larger_than_the_budget_is_refused_at_start() -> None:
    with pytest.raises(InsufficientMemory, match="more than the memory budget of 10 MB"):
        ModelRegistry([LocalModel("a", ModelConfig())], memory_mb=10)


@pytest.mark.parametrize(
    ("status", "body", "want"),
    [
        (400, {"error": {"message": "bad", "type": "invalid_request_error", "param": "x", "code": "c"}}, (400, "bad", "invalid_request_error", "x", "c")),
        (400, {"object": "error", "message": "old vllm", "type": "BadRequestError", "code": 400}, (400, "old vllm", "BadRequestError", None, None)),
        (422, {"detail": "nope"}, (422, "nope", "invalid_request_error", None, None)),
        (500, {"error": {"message": "boom"}}, (502, "The upstream server failed (HTTP 500): boom", "server_error", None, "upstream_error")),
    ],
)
def test_upstream_error_bodies(status: int, body: dict, want: tuple) -> None:
    err = error_from_body(status, json.dumps(body).encode())
    assert (err.status, err.message, err.type, err.param, err.code) == want


def test_plain_text_error_and_urls() -> None:
    assert error_from_body(503, b"overloaded").message == "The upstream server failed (HTTP 503): overloaded"
    assert root_url("http://h:8000/v1/") == "http://h:8000"
    assert safe_url("https://user:pw@h:8443/x") == "https://h:8443/x"


@pytest.mark.parametrize(("ctx", "n"), [(512, 4), (4096, 4), (8192, 2), (16384, 1), (131072, 1)])
def test_auto_parallel_sizes_for_the_context(ctx: int, n: int) -> None:
    assert auto_parallel(ctx) == n


# bytes of one token's f16 KV: SmolLM2-135M 23040 (30 layers, 3 KV heads of 64), Qwen2.5-0.5B
# 12288 (24 layers, 2 of 64), Llama 3.1 8B 131072 (32 layers, 8 of 128)
@pytest.mark.parametrize(
    ("ctx", "per_token", "n"),
    [
        (4096, 23040, 8),  # 755 MB: 8 fit 1 GiB
        (4096, 12288, 8),  # more would fit; 8 at most
        (4096, 131072, 4),  # 512 MB a sequence: the token rule's 4 stands
        (8192, 23040, 5),  # 189 MB each: 5 fit
        (16384, 23040, 2),  # more than the token rule's 1
        (32768, 131072, 1),  # 4 GiB each: one, as the token rule says
        (512, 0.0, 4),  # no attention sizes in the header: the token rule alone
    ],
)
def test_auto_parallel_takes_more_sequences_where_their_kv_is_small(ctx: int, per_token: float, n: int) -> None:
    assert auto_parallel(ctx, per_token) == n


def test_the_bundled_model_gets_eight_sequences_at_the_default_context() -> None:
    from toolserve.models.files import bundled_model, gguf_metadata
    from toolserve.serving.memory import kv_bytes_per_layer, sequences

    meta = gguf_metadata(bundled_model())
    assert sum(kv_bytes_per_layer(meta, "f16", "f16")) == 23040
    assert sequences(ModelConfig(), meta) == 8
    assert sequences(ModelConfig(ctx_size=16384), meta) == 2
    assert sequences(ModelConfig(parallel=3), meta) == 3  # --parallel is taken as given


def test_lora_keys_and_flags(tmp_path: Path) -> None:
    from toolserve.config import Lora, LoraModel, parse_lora, parse_lora_model

    path = write(tmp_path, (
        "models:\n  - id: a\n    lora: [one.gguf, 'two.gguf:0.5', {path: /abs/three.gguf, scale: 2}]\n"
        "    lora_models: {tuned: 'four.gguf:0.25', other: {path: five.gguf}}\n"
        "model_map: {'gpt-*': tuned}\n"
    ))
    cfg = load_models_config(path).models[0].local
    assert cfg is not None
    assert cfg.lora == (Lora(str(tmp_path / "one.gguf")), Lora(str(tmp_path / "two.gguf"), 0.5), Lora("/abs/three.gguf", 2.0))
    assert cfg.lora_models == (LoraModel("tuned", Lora(str(tmp_path / "four.gguf"), 0.25)), LoraModel("other", Lora(str(tmp_path / "five.gguf"))))
    assert parse_lora("C:/adapters/x.gguf", "--lora") == Lora("C:/adapters/x.gguf")  # a colon in the path is not a scale
    assert parse_lora("a.gguf:-0.5", "--lora") == Lora("a.gguf", -0.5)
    assert parse_lora_model(" t = a.gguf:2 ", "--lora-model") == LoraModel("t", Lora("a.gguf", 2.0))


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=96), version=st.sampled_from([1, 2, 3]))
def test_a_damaged_gguf_header_is_a_load_error(tmp_path_factory: pytest.TempPathFactory, body: bytes, version: int) -> None:
    """Whatever follows the magic and version, reading the header ends in its values or in a
    ModelLoadError naming the file, never another exception (the automatic --parallel reads it
    before the engine sees the file)."""
    import struct

    path = tmp_path_factory.mktemp("gguf") / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", version) + body)
    for tensors in (None, {}):
        try:
            gguf_metadata(path, tensors=tensors)
        except ModelLoadError as exc:
            assert str(path) in exc.message


def test_lengths_past_the_file_are_named() -> None:
    import struct
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad.gguf"
        path.write_bytes(b"GGUF" + b"\xff" * 64)  # a string length of 2^64 - 1
        with pytest.raises(ModelLoadError, match="damaged GGUF header"):
            gguf_metadata(path)
        # one key whose string value claims a terabyte
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 11) + b"tokenizer.k" + struct.pack("<IQ", 8, 1 << 40))
        assert gguf_metadata(path) == {}  # a vocabulary key is skipped by seeking, never read
        with pytest.raises(ModelLoadError, match="a string of 1099511627776 bytes"):
            gguf_metadata(path, keep=frozenset({"tokenizer.k"}))


def test_a_header_with_sizes_that_are_not_numbers_falls_back_to_the_token_rule() -> None:
    from toolserve.serving.memory import kv_bytes_per_layer, sequences

    meta = {"general.architecture": "x", "x.block_count": "thirty", "x.attention.head_count": 4, "x.embedding_length": 256}
    assert kv_bytes_per_layer(meta, "f16", "f16") == []
    assert sequences(ModelConfig(), meta) == 4  # 16384 tokens of 4096: as before the KV rule
