"""Tiny random text models as GGUF, made here for the tests (no model hub: the machines reach
only package registries), converted by llama.cpp's own converter as tests/vision/make_tiny_vlm.py
converts its model:

- `coder`: a Qwen2 causal LM whose vocabulary holds Qwen2.5-Coder's fill-in-the-middle tokens
  (<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>);
  llama.cpp finds them by name, so the GGUF declares prefix, suffix, middle, repository and
  file-separator tokens.
- `reranker`: a Qwen3 reranker (Qwen3-Reranker's recipe): the converter sees "qwen3-reranker"
  in the folder's name and writes rank pooling, the classifier head (the rows of "yes" and "no"
  of the LM head) and the model's "rerank" prompt template into the GGUF.
- `bert-reranker`: a BERT cross-encoder (BertForSequenceClassification, one label, a WordPiece
  vocabulary), as BGE rerankers are: a one-logit head and no prompt template, so pairs are
  framed by the vocabulary's own tokens ([CLS] query [SEP] document [SEP]).

Their words are noise; the tests check the paths (prompt layout, token counts, order by score).
Cached under ``~/.cache/toolserve-tests/tiny-text/<version-key>``; the key covers llama-cpp-python's
version and this file's content.

Usage: ``python tests/textmodels/make_tiny_text.py`` prints both paths; ``build("coder")``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__:
    from tests.vision.make_tiny_vlm import LLAMA_CPP_PYTHON_VERSION, QWEN2_SPLIT_PATTERN, _file_lock, fetch_converter
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vision"))
    from make_tiny_vlm import LLAMA_CPP_PYTHON_VERSION, QWEN2_SPLIT_PATTERN, _file_lock, fetch_converter

SEED = 4321
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
SPECIAL = {
    "coder": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *FIM_TOKENS],
    "reranker": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
}
# the folder name is what makes llama.cpp's converter write a reranker (Qwen3Model._is_qwen3_reranker)
FOLDER = {"coder": "tiny-qwen2-coder", "reranker": "qwen3-reranker-tiny", "bert-reranker": "tiny-bert-reranker"}
FILE = {"coder": "tiny-qwen2-coder-f16.gguf", "reranker": "tiny-qwen3-reranker-f16.gguf", "bert-reranker": "tiny-bert-reranker-f16.gguf"}
# the pre-tokenizer each vocabulary was trained with, as llama.cpp names it (its hash is unknown to the converter)
PRE = {"coder": "qwen2", "reranker": "qwen2", "bert-reranker": "jina-v2-en"}
BERT_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

CORPUS = """\
def add(a, b):
    return a + b
def main():
    print("hello world")
    return 0
class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y
import os, sys, json
for i in range(10): total += i
The quick brown fox jumps over the lazy dog. A cat sits on the mat.
Paris is the capital of France. The weather is sunny today.
Judge whether the Document meets the requirements based on the Query and the Instruct provided.
yes
no
yes no yes no
<Instruct>: Given a web search query, retrieve relevant passages that answer the query
<Query>: <Document>: system user assistant
"""
CORPUS = CORPUS + "yes\nno\n" * 20  # "yes" and "no" whole tokens: the reranker's head reads their rows


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolserve-tests" / "tiny-text"


def version_key() -> str:
    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return f"tiny-text-llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}-{recipe}"


def build_tokenizer(out_dir: Path, special: list[str]) -> int:
    """A byte-level BPE with Qwen2's pre-tokenizer and these special tokens, saved as a
    Qwen2TokenizerFast; returns the vocabulary's size."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=1, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    fast = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                              unk_token=None, clean_up_tokenization_spaces=False, model_max_length=4096)  # fmt: skip
    fast.chat_template = CHATML
    fast.save_pretrained(out_dir, save_jinja_files=False)
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = False  # Qwen adds no BOS
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    return len(fast)


def build_bert_tokenizer(out_dir: Path) -> int:
    """A lower-casing WordPiece vocabulary, saved as a BertTokenizerFast; returns its size."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=400, min_frequency=1, special_tokens=BERT_SPECIAL, show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    fast = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                             mask_token="[MASK]", do_lower_case=True, model_max_length=512)  # fmt: skip
    fast.save_pretrained(out_dir)
    return len(fast)


def build_hf(kind: str, out_dir: Path) -> None:
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    if kind == "bert-reranker":
        vocab = build_bert_tokenizer(out_dir)
        torch.manual_seed(SEED)
        config = BertConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            max_position_embeddings=512, num_labels=1, architectures=["BertForSequenceClassification"])  # fmt: skip
        BertForSequenceClassification(config).save_pretrained(out_dir, safe_serialization=True)
        return
    vocab = build_tokenizer(out_dir, SPECIAL[kind])
    shape: dict[str, Any] = {
        "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096, "tie_word_embeddings": False,
    }  # fmt: skip
    torch.manual_seed(SEED)
    if kind == "coder":
        model: Any = Qwen2ForCausalLM(Qwen2Config(**shape, architectures=["Qwen2ForCausalLM"]))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=16, architectures=["Qwen3ForCausalLM"]))
    model.save_pretrained(out_dir, safe_serialization=True)


# convert_hf_to_gguf.main() from the sdist's own folder, its gguf-py first; our fresh vocabularies
# have no known pre-tokenizer hash, so the lookup answers the pre-tokenizer each was trained with
_RUNNER = """
import sys
llama_dir, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [llama_dir, llama_dir + "/gguf-py"]
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[3:]]
convert_hf_to_gguf.main()
"""


def build(kind: str, cache_dir: Path | None = None) -> Path:
    """The GGUF of `kind` ("coder", "reranker" or "bert-reranker"), built into cache_dir if missing."""
    cache_dir = Path(cache_dir) if cache_dir is not None else _cache_root() / version_key()
    out = cache_dir / FILE[kind]
    if out.is_file():
        return out
    with _file_lock(cache_dir.parent / f".{cache_dir.name}.lock"):
        if out.is_file():
            return out
        cache_dir.mkdir(parents=True, exist_ok=True)
        llama_dir = fetch_converter(cache_dir / "src")
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            hf_dir = Path(tmp) / FOLDER[kind]
            build_hf(kind, hf_dir)
            partial = Path(tmp) / FILE[kind]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            env.pop("NO_LOCAL_GGUF", None)
            proc = subprocess.run([sys.executable, "-c", _RUNNER, str(llama_dir), PRE[kind], str(hf_dir), "--outfile", str(partial), "--outtype", "f16"],
                                  env=env, capture_output=True, text=True)  # fmt: skip
            if proc.returncode != 0 or not partial.is_file():
                raise RuntimeError(f"convert_hf_to_gguf failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            os.replace(partial, out)  # whole or not at all: an interrupted build leaves nothing
    return out


if __name__ == "__main__":
    for k in FILE:
        print(build(k))
