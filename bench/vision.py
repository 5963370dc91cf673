"""Image cost: prompt tokens per image, and the time to encode one 512x512 image.

Two random Qwen2-VL models, both built with llama.cpp's converter (no hub download):

- tiny: tests/vision/make_tiny_vlm.py's test model (vision tower width 64, depth 3);
- 2b-vision: a vision tower with Qwen2-VL-2B-Instruct's sizes (depth 32, width 1280, 16 heads,
  MLP ratio 4, 14-pixel patches, 2x2 merger into 1536) on a minimal text model (1 layer, width
  1536, the tiny BPE tokenizer). Its image encode costs what the real 2B model's does; its text
  part does not, and the encode time below leaves the text part out.

Measured in one run, for both:

(a) prompt tokens per image (256x256, 512x512, 1024x768) through `toolserve serve` over HTTP:
    usage.prompt_tokens of a chat request with one image minus the same request without it.
(b) the time to encode one 512x512 image, in-process with LlamaCppEngine: tokenize_image plus a
    generation with max_tokens=1, minus the same generation on a text prompt of the same token
    count. Median of --runs, each with fresh pixels, with --threads 1 and 2 (one engine each).

    python bench/vision.py [--runs 5] [--threads 1,2]

The 2b-vision model is cached under ~/.cache/toolserve-tests/qwen2vl-2b-vision/<key> (a 1.3 GB
mmproj); building it took about 30 s here. A full run took 7-8 minutes on the shared 2-core
machine: one 512x512 encode with the 2B-sized tower is ~25 s, and the 1024x768 request over
HTTP ~2 minutes. `--runs 3 --threads 1` makes it shorter.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import hashlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "vision"))
sys.path.insert(0, str(ROOT / "bench"))
import make_tiny_vlm as tiny  # noqa: E402
from decode import free_port, start  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The 2b-vision model
# ---------------------------------------------------------------------------------------------
# Qwen/Qwen2-VL-2B-Instruct's config.json sets only hidden_size 1536 in vision_config (besides
# the legacy in_chans / spatial_patch_size); the rest are Qwen2VLVisionConfig's defaults.
VISION_2B: dict[str, Any] = {
    "depth": 32,
    "embed_dim": 1280,
    "num_heads": 16,
    "mlp_ratio": 4,
    "hidden_size": 1536,  # the merger's output = the 2B LLM's width
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "in_channels": 3,
    "hidden_act": "quick_gelu",
}
# The 2B text model's width, heads and M-RoPE sections, but 1 layer and a small MLP.
TEXT_2B: dict[str, Any] = {
    "hidden_size": 1536,
    "intermediate_size": 256,  # 8960 in the real model
    "num_hidden_layers": 1,  # 28 in the real model
    "num_attention_heads": 12,  # head_dim 128
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "tie_word_embeddings": False,
}
RECIPE_2B = 1  # bump when the 2B build changes: the cache key covers this and the configs only
MODEL_2B = "qwen2vl-2b-vision-f16.gguf"
MMPROJ_2B = "mmproj-qwen2vl-2b-vision-f16.gguf"


def cache_dir_2b() -> Path:
    """Keyed by make_tiny_vlm's key (converter version + its recipe: tokenizer, preprocessor)
    and by RECIPE_2B and the two configs above, so editing this file elsewhere does not rebuild
    1.3 GB."""
    recipe = json.dumps([RECIPE_2B, VISION_2B, TEXT_2B, tiny.SEED], sort_keys=True).encode()
    key = f"{tiny.version_key()}-{hashlib.sha256(recipe).hexdigest()[:12]}"
    return tiny._default_cache_root().parent / "qwen2vl-2b-vision" / key


def build_2b() -> tuple[Path, Path]:
    cache_dir = cache_dir_2b()
    model_path, mmproj_path = cache_dir / MODEL_2B, cache_dir / MMPROJ_2B
    if model_path.is_file() and mmproj_path.is_file():
        return model_path, mmproj_path
    with tiny._file_lock(cache_dir.parent / f".{cache_dir.name}.lock"):
        if model_path.is_file() and mmproj_path.is_file():
            return model_path, mmproj_path
        print(f"building {cache_dir} (once; about 30 s)", file=sys.stderr)
        cache_dir.mkdir(parents=True, exist_ok=True)
        # The converter is the one make_tiny_vlm fetched for its own model (same version key).
        llama_dir = tiny.fetch_converter(tiny.build()[0].parent / "src")
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            hf_dir = Path(tmp) / "hf"
            tiny.build_hf_model(hf_dir, TEXT_2B, VISION_2B, half=True)
            tmp_model = tiny.convert(llama_dir, hf_dir, Path(tmp) / MODEL_2B, mmproj=False)
            tmp_mmproj = tiny.convert(llama_dir, hf_dir, Path(tmp) / MMPROJ_2B, mmproj=True)
            os.replace(tmp_mmproj, mmproj_path)
            os.replace(tmp_model, model_path)
    return model_path, mmproj_path


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------
def noise_rgb(width: int, height: int, seed: int) -> bytes:
    """Random pixels: every call with a new seed is a new image (no cache hit on its pixels)."""
    import random

    return random.Random(seed).randbytes(width * height * 3)


def png_data_uri(width: int, height: int, seed: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (width, height), noise_rgb(width, height, seed)).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


# ---------------------------------------------------------------------------------------------
# (a) prompt tokens per image, over HTTP
# ---------------------------------------------------------------------------------------------
SIZES = [(256, 256), (512, 512), (1024, 768)]
QUESTION = "Describe the image."


def prompt_tokens(client: httpx.Client, url: str, content: list[dict[str, Any]]) -> tuple[int, float]:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "temperature": 0}
    t0 = time.perf_counter()
    resp = client.post(f"{url}/v1/chat/completions", json=body)
    resp.raise_for_status()
    return int(resp.json()["usage"]["prompt_tokens"]), time.perf_counter() - t0


def tokens_over_http(model: Path, mmproj: Path, threads: int, seed: int) -> dict[str, tuple[int, float]]:
    """{size: (prompt tokens the image adds, request seconds)}."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "toolserve.cli", "serve", "--model", str(model), "--mmproj", str(mmproj),
           "--port", str(port), "--log-level", "warning", "--ctx-size", "4096", "--threads", str(threads),
           "--cache-ram", "0"]  # fmt: skip
    proc = start(cmd, url)
    out = {}
    try:
        with httpx.Client(timeout=600) as client:
            text_only, _ = prompt_tokens(client, url, [{"type": "text", "text": QUESTION}])
            for i, (w, h) in enumerate(SIZES):
                image = {"type": "image_url", "image_url": {"url": png_data_uri(w, h, seed + i)}}
                n, secs = prompt_tokens(client, url, [image, {"type": "text", "text": QUESTION}])
                out[f"{w}x{h}"] = (n - text_only, secs)
    finally:
        proc.terminate()
        proc.wait()
    return out


# ---------------------------------------------------------------------------------------------
# (b) encode time of one 512x512 image, in-process
# ---------------------------------------------------------------------------------------------
def encode_times(model: Path, mmproj: Path, threads: int, runs: int, seed: int) -> dict[str, Any]:
    from toolserve.engine.base import MediaSpan
    from toolserve.engine.llama_cpp import LlamaCppEngine
    from toolserve.serving.media import decoded
    from toolserve.types import SamplingParams

    engine = LlamaCppEngine(str(model), n_ctx=4096, n_threads=threads, mmproj=str(mmproj))
    # Also time the engine's image step itself (libmtmd encode + decoding the embeddings into
    # the context): no subtraction, so none of the text baseline's noise.
    read_image = engine._read_image
    direct: list[float] = []

    def timed_read_image(job: Any) -> None:
        t0 = time.perf_counter()
        read_image(job)
        direct.append(time.perf_counter() - t0)

    engine._read_image = timed_read_image  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=1, temperature=0.0)
    head = engine.tokenize("<|im_start|>user\n")
    tail = engine.tokenize(f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    filler = engine.tokenize("The quick brown fox jumps over the lazy dog. " * 200)

    async def first_token(prompt: list[int], media: list[MediaSpan]) -> float:
        t0 = time.perf_counter()
        gen = engine.submit(prompt, params, media)
        async for _ in gen.events():
            pass
        return time.perf_counter() - t0

    async def one_run(i: int) -> tuple[float, float, float, int, int]:
        image = decoded(512, 512, noise_rgb(512, 512, seed + i))
        t0 = time.perf_counter()
        parts = engine.tokenize_image(image)  # libmtmd: resize, normalise, patches (no encode)
        t_tok = time.perf_counter() - t0
        prompt, media = list(head), []
        for p in parts:
            if isinstance(p, MediaSpan):
                span = dataclasses.replace(p, start=len(prompt))
                media.append(span)
                prompt.extend([span.key] * span.n_tokens)
            else:
                prompt.append(p)
        prompt.extend(tail)
        t_img = await first_token(prompt, media)
        # The same number of prompt tokens, text only (the cache is off: nothing is reused).
        text = head + filler[: len(prompt) - len(head) - len(tail)] + tail
        assert len(text) == len(prompt)
        t_text = await first_token(text, [])
        return t_tok, t_img, t_text, len(prompt), media[0].n_tokens

    async def all_runs() -> list[tuple[float, float, float, int, int]]:
        return [await one_run(i) for i in range(runs)]

    try:
        rows = asyncio.run(all_runs())
    finally:
        engine.close()
    tok = [r[0] for r in rows]
    img = [r[1] for r in rows]
    txt = [r[2] for r in rows]
    return {
        "prompt_tokens": rows[0][3],
        "image_tokens": rows[0][4],
        "eval_image": direct,
        "tokenize_image": tok,
        "image_ttft": img,
        "text_ttft": txt,
        "encode": statistics.median(tok) + statistics.median(img) - statistics.median(txt),
    }


# ---------------------------------------------------------------------------------------------
def ms(x: float) -> str:
    return f"{x * 1000:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="512x512 encodes per model and thread count")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts for (b)")
    ap.add_argument("--http-threads", type=int, default=2, help="server --threads for (a)")
    ap.add_argument(
        "--seed", type=int, default=int(time.time()), help="pixel seed (default: the clock, so images are fresh)"
    )
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]

    models = {"tiny": tiny.build(), "2b-vision": build_2b()}
    started = time.perf_counter()
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for name, (m, p) in models.items():
        print(f"{name}: {m.name} {m.stat().st_size / 2**20:.1f} MiB, {p.name} {p.stat().st_size / 2**20:.1f} MiB")

    tokens = {name: tokens_over_http(m, p, args.http_threads, args.seed) for name, (m, p) in models.items()}
    enc = {
        (name, t): encode_times(m, p, t, args.runs, args.seed + 1000 * t)
        for name, (m, p) in models.items()
        for t in threads
    }

    print(f"\n(a) prompt tokens per image, over HTTP (server --threads {args.http_threads});"
          " the count includes <|vision_start|> and <|vision_end|>; request time in brackets")  # fmt: skip
    print("| model | " + " | ".join(f"{w}x{h}" for w, h in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for name, row in tokens.items():
        print(f"| {name} | " + " | ".join(f"{n} ({s:.2f} s)" for n, s in row.values()) + " |")

    print(f"\n(b) 512x512 image, in-process LlamaCppEngine, median of {args.runs} fresh images, ms;"
          " encode = tokenize_image + TTFT(image prompt) - TTFT(text prompt of the same length);"
          " eval_image = the engine's image step timed directly (encode + decoding its embeddings)")  # fmt: skip
    print(
        "| model | threads | prompt (image) tokens | tokenize_image | TTFT image | TTFT text | encode | eval_image | eval_image runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, t), r in enc.items():
        med = statistics.median
        runs = ", ".join(ms(x) for x in r["eval_image"])
        print(f"| {name} | {t} | {r['prompt_tokens']} ({r['image_tokens']}) | {ms(med(r['tokenize_image']))}"
              f" | {ms(med(r['image_ttft']))} | {ms(med(r['text_ttft']))} | **{ms(r['encode'])}**"
              f" | {ms(med(r['eval_image']))} | {runs} |")  # fmt: skip
    la = os.getloadavg()
    print(
        f"\nload average at end: {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}; measuring took {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
