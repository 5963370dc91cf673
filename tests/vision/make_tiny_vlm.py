"""Build a tiny, randomly initialised Qwen2-VL model as GGUF + mmproj GGUF, for vision tests.

Nothing can be downloaded from a model hub here, so the model is made from scratch:

1. llama.cpp's own converter (``convert_hf_to_gguf.py``, its ``conversion`` package and the
   matching ``gguf-py``) is taken from llama-cpp-python's source distribution, fetched with
   ``pip download`` into the cache. None of that code lives in this repository.
2. A byte-level BPE tokenizer with Qwen2's pre-tokenizer and Qwen2-VL's special tokens is
   trained on a small built-in text, and a Qwen2-VL model with a few tiny layers is initialised
   with a fixed torch seed and saved with ``transformers``.
3. The converter writes the text model (``--outtype f16``) and the vision tower (``--mmproj``).

The result is cached under ``~/.cache/toolserve-tests/tiny-vlm/<version-key>`` and only rebuilt
when missing; the key covers the llama-cpp-python version and this file's content, so editing
the recipe rebuilds it.

Usage::

    python tests/vision/make_tiny_vlm.py            # build (or reuse) and print the two paths
    python tests/vision/make_tiny_vlm.py --probe    # also load it with libmtmd and print numbers

or from Python: ``model_gguf, mmproj_gguf = build()``.

Building needs, besides llama-cpp-python itself (versions used when this was written):
torch==2.13.0 (CPU build), transformers==4.57.6 (the version the converter's own requirements
pin), tokenizers==0.22.2, safetensors, and sentencepiece==0.2.3 (the converter imports it
before it looks for a tokenizer.model, even for BPE models); gguf-py also needs numpy and
pyyaml. ``probe()`` needs only llama-cpp-python.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The converter must come from the same llama.cpp that the installed bindings were built from.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

SEED = 1234

# ---------------------------------------------------------------------------------------------
# Model shape: as small as llama.cpp accepts while keeping every Qwen2-VL feature (GQA, M-RoPE,
# 2x2 patch merger, Conv3D patch embedding with temporal_patch_size 2).
# ---------------------------------------------------------------------------------------------
TEXT_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # head_dim 16
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    # M-RoPE: (temporal, height, width) sections, summing to head_dim / 2.
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "tie_word_embeddings": False,
}
VISION_CONFIG: dict[str, Any] = {
    # 3 is the minimum: the converter maps the merger's "visual.merger.mlp.{bid}" tensors with
    # the block index range, so mlp.2 (the second merger Linear) only maps when depth >= 3.
    "depth": 3,
    "embed_dim": 64,  # width of the vision tower
    "num_heads": 4,
    "mlp_ratio": 2,
    "hidden_size": TEXT_CONFIG["hidden_size"],  # output width of the patch merger = text width
    "patch_size": 14,
    "spatial_merge_size": 2,  # 2x2 patches -> one image token (so 28x28 pixels per token)
    "temporal_patch_size": 2,
    "in_channels": 3,
    "hidden_act": "quick_gelu",
}
# Same values as Qwen/Qwen2-VL-2B-Instruct's preprocessor_config.json (the converter reads
# image_mean / image_std from it).
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
    "rescale_factor": 1 / 255,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 1280,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}

# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------
# Qwen2's special tokens, in Qwen2's order; they get the ids right after the BPE vocabulary
# (as in the real model, where <|endoftext|> is 151643 right after the 151643 BPE tokens).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
BPE_VOCAB_SIZE = 512  # 256 byte tokens + 256 merges

# Qwen2's pre-tokenizer split (from its tokenizer.json); llama.cpp implements the same split
# under the pre-tokenizer name "qwen2".
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA_CPP_PRE_TOKENIZER = "qwen2"

# Qwen2-VL-Instruct's chat template: image parts become <|vision_start|><|image_pad|><|vision_end|>.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Training text for the BPE: enough for merges of common English, chat roles and JSON.
CORPUS = """\
The quick brown fox jumps over the lazy dog. A picture is worth a thousand words.
Describe the image. What is in this picture? The image shows a red square on a white background.
There is a cat sitting on a chair next to the window, and the sun is shining.
You are a helpful assistant. The user asks a question and the assistant answers it.
system user assistant tool function arguments name content role image text type
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
{"role": "user", "content": [{"type": "image_url"}, {"type": "text", "text": "What colour is it?"}]}
def main():
    print("hello world")
    return 0
Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 and dates like 2024-01-31 appear in text too.
"""


def _default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve-tests" / "tiny-vlm"


def version_key() -> str:
    """Cache key: the llama.cpp the converter comes from + a hash of this recipe."""
    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return f"qwen2vl-llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}-{recipe}"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Serialise builds of the same cache dir across processes (e.g. pytest-xdist workers)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------
# Step 1: llama.cpp's converter from the llama-cpp-python sdist
# ---------------------------------------------------------------------------------------------
def fetch_converter(dest: Path) -> Path:
    """Download the llama-cpp-python sdist and extract only the converter and gguf-py.

    Returns the extracted ``vendor/llama.cpp`` directory (holding convert_hf_to_gguf.py,
    conversion/ and gguf-py/).
    """
    llama_dir = dest / "llama.cpp"
    if (llama_dir / "convert_hf_to_gguf.py").is_file():
        return llama_dir
    with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.exists() else None) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", tmp],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")
        staging = Path(tmp) / "llama.cpp"
        with tarfile.open(sdist) as tar:
            members = []
            for m in tar.getmembers():
                if not m.name.startswith(prefix) or not (m.isfile() or m.isdir()):
                    continue
                rel = m.name[len(prefix) :]
                if rel.startswith(wanted):
                    m.name = rel
                    members.append(m)
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(staging, members=members, filter="data")
            else:
                tar.extractall(staging, members=members)
        if not (staging / "convert_hf_to_gguf.py").is_file():
            raise RuntimeError(f"convert_hf_to_gguf.py not found in {sdist.name}")
        dest.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), llama_dir)
    return llama_dir


# ---------------------------------------------------------------------------------------------
# Step 2: tokenizer + random model in Hugging Face format
# ---------------------------------------------------------------------------------------------
def build_tokenizer(out_dir: Path) -> dict[str, int]:
    """Train a byte-level BPE with Qwen2's pre-tokenizer; save it as a Qwen2TokenizerFast.

    Returns the ids of the special tokens.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte is a token
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])

    fast = Qwen2TokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=TEXT_CONFIG["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    # save_jinja_files=False keeps the chat template inside tokenizer_config.json.
    fast.save_pretrained(out_dir, save_jinja_files=False)

    # Qwen2 adds no BOS; say so explicitly so the GGUF carries add_bos_token = false.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = False
    cfg["add_eos_token"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")

    ids: dict[str, int] = {}
    for t in SPECIAL_TOKENS:
        token_id = fast.convert_tokens_to_ids(t)
        assert isinstance(token_id, int)
        ids[t] = token_id
    ids["vocab_size"] = len(fast)
    return ids


def build_hf_model(
    out_dir: Path,
    text: dict[str, Any] = TEXT_CONFIG,
    vision: dict[str, Any] = VISION_CONFIG,
    *,
    half: bool = False,
) -> None:
    """Write tokenizer + random Qwen2-VL weights + configs into out_dir (HF layout). The shapes
    are the tiny ones unless given (bench/vision.py builds a 2B-size vision tower); `half` saves
    f16 weights (the converter writes f16 anyway: half the bytes to write and read back)."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    out_dir.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(out_dir)

    text_config = {
        **text,
        "vocab_size": ids["vocab_size"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    config = Qwen2VLConfig(
        text_config=text_config,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
        architectures=["Qwen2VLForConditionalGeneration"],
    )

    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(config)  # float32, weights drawn from the seeded RNG
    # save_pretrained writes the legacy tensor names (visual.*, model.*, lm_head.*) that the
    # converter expects.
    (model.half() if half else model).save_pretrained(out_dir, safe_serialization=True)
    (out_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Step 3: conversion with llama.cpp's converter
# ---------------------------------------------------------------------------------------------
# Runs convert_hf_to_gguf.main() as an imported module, in a child process so that its
# sys.path / monkeypatch never leak into the caller. The sdist's gguf-py goes first on sys.path
# so that its version matches the converter. The only patch: our freshly trained BPE has no
# known pre-tokenizer hash, so the hash lookup returns the name of the pre-tokenizer we used.
_CONVERTER_RUNNER = """
import sys
llama_dir, pre_name = sys.argv[1], sys.argv[2]
sys.path[:0] = [llama_dir, llama_dir + "/gguf-py"]
import gguf
assert gguf.__file__.startswith(llama_dir), gguf.__file__
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre_name
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[3:]]
convert_hf_to_gguf.main()
"""


def convert(llama_dir: Path, hf_dir: Path, outfile: Path, *, mmproj: bool) -> Path:
    args = [str(hf_dir), "--outfile", str(outfile), "--outtype", "f16", "--model-name", "tiny-qwen2vl"]
    if mmproj:
        args.append("--mmproj")
    # Offline: everything is local, and a hub lookup would only hang without network.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("NO_LOCAL_GGUF", None)  # that variable would make the converter skip its gguf-py
    proc = subprocess.run(
        [sys.executable, "-c", _CONVERTER_RUNNER, str(llama_dir), LLAMA_CPP_PRE_TOKENIZER, *args],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not outfile.is_file():
        raise RuntimeError(f"convert_hf_to_gguf failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return outfile


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
MODEL_NAME = "tiny-qwen2vl-f16.gguf"
MMPROJ_NAME = "mmproj-tiny-qwen2vl-f16.gguf"


def build(cache_dir: Path | None = None) -> tuple[Path, Path]:
    """Return (model_gguf, mmproj_gguf), building them into cache_dir if they are missing.

    cache_dir defaults to ``~/.cache/toolserve-tests/tiny-vlm/<version_key()>``.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else _default_cache_root() / version_key()
    model_path, mmproj_path = cache_dir / MODEL_NAME, cache_dir / MMPROJ_NAME
    if model_path.is_file() and mmproj_path.is_file():
        return model_path, mmproj_path

    with _file_lock(cache_dir.parent / f".{cache_dir.name}.lock"):
        if model_path.is_file() and mmproj_path.is_file():  # built by another process meanwhile
            return model_path, mmproj_path
        cache_dir.mkdir(parents=True, exist_ok=True)
        llama_dir = fetch_converter(cache_dir / "src")
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            hf_dir = Path(tmp) / "hf"
            build_hf_model(hf_dir)
            # Write under temporary names, then rename: an interrupted build leaves no
            # half-written file that a later run would take as done.
            tmp_model = convert(llama_dir, hf_dir, Path(tmp) / MODEL_NAME, mmproj=False)
            tmp_mmproj = convert(llama_dir, hf_dir, Path(tmp) / MMPROJ_NAME, mmproj=True)
            os.replace(tmp_mmproj, mmproj_path)
            os.replace(tmp_model, model_path)
    return model_path, mmproj_path


# ---------------------------------------------------------------------------------------------
# Demo / verification with the low-level bindings (no high-level chat handlers)
# ---------------------------------------------------------------------------------------------
def _rgb_image(width: int, height: int) -> bytes:
    """A deterministic RGB gradient: width*height*3 bytes, row-major, no padding."""
    red = bytes((x * 255) // max(width - 1, 1) for x in range(width))
    out = bytearray()
    for y in range(height):
        green = (y * 255) // max(height - 1, 1)
        for r in red:
            out += bytes((r, green, 128))
    return bytes(out)


def probe(
    model_path: Path | None = None,
    mmproj_path: Path | None = None,
    *,
    n_threads: int = 1,
    quiet: bool = True,
) -> dict[str, Any]:
    """Load the tiny VLM through llama_cpp + llama_cpp.mtmd_cpp and report what it does.

    Prints and returns: image tokens (and M-RoPE positions) per image size, the median of 3
    encodes of a 512x512 image, whether the model decodes with M-RoPE, and 8 greedy tokens
    after evaluating the prompt twice (helper for all chunks / chunk by chunk), which must agree.
    """
    import ctypes

    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    if model_path is None or mmproj_path is None:
        model_path, mmproj_path = build()

    # llama.cpp and libmtmd log to stderr by default (libmtmd even per tokenize / encode).
    silent = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
    default = llama_cpp.llama_log_callback()  # NULL = back to the default stderr logger
    if quiet:
        llama_cpp.llama_log_set(silent, None)
        mtmd.mtmd_helper_log_set(silent, None)  # also calls mtmd_log_set
    llama_cpp.llama_backend_init()

    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), llama_cpp.llama_model_default_params())
    assert model, "model failed to load"
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    cparams = llama_cpp.llama_context_default_params()
    # n_ctx counts KV cells, i.e. tokens (a 512x512 image = 324 of them), not M-RoPE positions.
    cparams.n_ctx = 4096
    # Image embeddings are decoded n_batch at a time. Qwen2-VL's LLM attends causally, so an
    # image may span several batches; models with non-causal image attention (Gemma 3) need
    # the whole image in one ubatch, so n_batch = n_ubatch >= the largest image is the safe choice.
    cparams.n_batch = 2048
    cparams.n_ubatch = 2048
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    assert ctx, "context failed to initialise"
    mem = llama_cpp.llama_get_memory(ctx)

    vparams = mtmd.mtmd_context_params_default()
    vparams.use_gpu = False
    vparams.n_threads = n_threads
    vparams.print_timings = False
    vparams.warmup = False  # the default warmup encodes a 1288x1288 dummy image at init
    mctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), model, vparams)
    assert mctx, "mtmd_init_from_file failed"

    marker = mtmd.mtmd_default_marker().decode()  # "<__media__>"
    use_mrope = bool(mtmd.mtmd_decode_use_mrope(mctx))

    def make_bitmap(w: int, h: int) -> int:
        data = _rgb_image(w, h)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bmp = mtmd.mtmd_bitmap_init(w, h, buf)  # copies the pixels: buf may go away
        assert bmp, "mtmd_bitmap_init failed"
        return bmp

    def tokenize(prompt: str, bitmaps: list[int]) -> int:
        # One bitmap per marker in the prompt, in order. mtmd wraps each image in
        # <|vision_start|> ... <|vision_end|> itself, so the prompt holds the bare marker.
        chunks = mtmd.mtmd_input_chunks_init()
        raw = prompt.encode()
        text = mtmd.mtmd_input_text(text=raw, text_len=len(raw), add_special=True, parse_special=True)
        arr = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        rc = mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), arr, len(bitmaps))
        assert rc == 0, f"mtmd_tokenize failed: {rc}"
        return chunks

    def chunk_list(chunks: int) -> list[int]:
        return [mtmd.mtmd_input_chunks_get(chunks, i) for i in range(mtmd.mtmd_input_chunks_size(chunks))]

    def image_chunk(chunks: int) -> int:
        return next(
            c for c in chunk_list(chunks) if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
        )

    def piece(token: int) -> str:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode(errors="replace")

    def greedy(n_past: int, n: int) -> list[int]:
        """Greedy decoding from the logits of the last evaluated token."""
        out: list[int] = []
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        try:
            for _ in range(n):
                logits = llama_cpp.llama_get_logits_ith(ctx, -1)
                tok = max(range(n_vocab), key=lambda i: logits[i])
                out.append(tok)
                batch.n_tokens = 1
                batch.token[0] = tok
                # Text after an image continues at n_past as returned by the helpers: with
                # M-RoPE that is the prompt's n_pos, smaller than its token count.
                batch.pos[0] = n_past
                batch.n_seq_id[0] = 1
                batch.seq_id[0][0] = 0
                batch.logits[0] = True
                assert llama_cpp.llama_decode(ctx, batch) == 0
                n_past += 1
        finally:
            llama_cpp.llama_batch_free(batch)
        return out

    prompt = f"<|im_start|>user\n{marker}Describe the image.<|im_end|>\n<|im_start|>assistant\n"

    # --- image tokens per size -----------------------------------------------------------
    sizes: dict[str, dict[str, Any]] = {}
    for side in (64, 256, 512):
        bmp = make_bitmap(side, side)
        chunks = tokenize(prompt, [bmp])
        img = image_chunk(chunks)
        img_tokens = mtmd.mtmd_input_chunk_get_tokens_image(img)
        sizes[f"{side}x{side}"] = {
            "image_tokens": mtmd.mtmd_input_chunk_get_n_tokens(img),
            "grid": f"{mtmd.mtmd_image_tokens_get_nx(img_tokens)}x{mtmd.mtmd_image_tokens_get_ny(img_tokens)}",
            "image_n_pos": mtmd.mtmd_input_chunk_get_n_pos(img),
            "prompt_tokens": mtmd.mtmd_helper_get_n_tokens(chunks),
            "prompt_n_pos": mtmd.mtmd_helper_get_n_pos(chunks),
        }
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bmp)

    # --- encode time for one 512x512 image (vision tower + merger only) -------------------
    bmp = make_bitmap(512, 512)
    chunks = tokenize(prompt, [bmp])
    img = image_chunk(chunks)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        assert mtmd.mtmd_encode_chunk(mctx, img) == 0
        times.append(time.perf_counter() - t0)
    encode_ms = sorted(times)[1] * 1000

    # --- (a) evaluate all chunks with mtmd_helper_eval_chunks, then decode greedily -------
    llama_cpp.llama_memory_clear(mem, True)
    new_n_past = llama_cpp.llama_pos(0)
    t0 = time.perf_counter()
    rc = mtmd.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, cparams.n_batch, True, ctypes.byref(new_n_past))
    eval_ms = (time.perf_counter() - t0) * 1000
    assert rc == 0, f"mtmd_helper_eval_chunks failed: {rc}"
    n_past_helper = new_n_past.value
    kv_pos_max = llama_cpp.llama_memory_seq_pos_max(mem, 0)
    tokens_helper = greedy(n_past_helper, 8)

    # --- (b) the same chunk by chunk: text with eval_chunk_single, image with encode + decode
    llama_cpp.llama_memory_clear(mem, True)
    chunks_list = chunk_list(chunks)
    n_past = 0
    for i, chunk in enumerate(chunks_list):
        logits_last = i == len(chunks_list) - 1
        if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            # Pitfall: for text chunks eval_chunk_single ADDS to *new_n_past (for images it
            # assigns), so seed it with n_past.
            out = llama_cpp.llama_pos(n_past)
            rc = mtmd.mtmd_helper_eval_chunk_single(
                mctx, ctx, chunk, n_past, 0, cparams.n_batch, logits_last, ctypes.byref(out)
            )
        else:
            assert mtmd.mtmd_encode_chunk(mctx, chunk) == 0
            embd = mtmd.mtmd_get_output_embd(mctx)  # n_tokens * n_embd floats, owned by mctx
            out = llama_cpp.llama_pos(0)
            # Sets the M-RoPE (t, y, x) positions and non-causal attention when the model needs
            # them, and advances n_past by the chunk's n_pos (max(nx, ny) with M-RoPE).
            # The binding wants a CFUNCTYPE instance, not None: an empty one is a NULL callback.
            rc = mtmd.mtmd_helper_decode_image_chunk(
                mctx, ctx, chunk, embd, n_past, 0, cparams.n_batch, ctypes.byref(out),
                mtmd.mtmd_helper_post_decode_callback(), None,
            )  # fmt: skip
        assert rc == 0, f"chunk {i} failed: {rc}"
        n_past = out.value
    tokens_chunkwise = greedy(n_past, 8)

    result = {
        "use_mrope": use_mrope,
        "use_non_causal": bool(mtmd.mtmd_decode_use_non_causal(mctx, img)),
        "sizes": sizes,
        "n_threads": n_threads,
        "encode_512_ms_median_of_3": round(encode_ms, 1),
        "eval_prompt_512_ms": round(eval_ms, 1),
        "n_past_after_prompt_512": n_past_helper,
        "kv_seq_pos_max_after_prompt_512": kv_pos_max,
        "greedy_tokens": tokens_helper,
        "greedy_text": "".join(piece(t) for t in tokens_helper),
        "chunkwise_matches_helper": tokens_chunkwise == tokens_helper and n_past == n_past_helper,
        "n_vocab": n_vocab,
    }

    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bmp)
    mtmd.mtmd_free(mctx)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    if quiet:
        llama_cpp.llama_log_set(default, None)
        mtmd.mtmd_helper_log_set(default, None)

    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="where to build (default: versioned user cache)")
    parser.add_argument("--probe", action="store_true", help="load the result with libmtmd and print measurements")
    parser.add_argument("--threads", type=int, default=1, help="threads for --probe")
    parser.add_argument("--verbose", action="store_true", help="let --probe show llama.cpp's logs")
    args = parser.parse_args(argv)
    model_path, mmproj_path = build(args.cache_dir)
    print(model_path)
    print(mmproj_path)
    if args.probe:
        probe(model_path, mmproj_path, n_threads=args.threads, quiet=not args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
