"""`toolserve pull REF`, `toolserve models`, `toolserve rm REF`: the command-line side of
models by name. Each prints one clear line on an error (main() in cli/ catches it)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from toolserve.models.refs import is_reference, parse


def add_commands(sub: Any, hub_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    pull = sub.add_parser("pull", help="download a model from the Hugging Face Hub without serving it")
    pull.add_argument("reference", help="owner/repo[:QUANT] or hf://owner/repo/FILE.gguf (ollama: and lmstudio: are only checked)")
    hub_flags(pull)
    pull.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    pull.set_defaults(run=run_pull)
    models = sub.add_parser("models", help="list the models on disk: Hugging Face cache, Ollama, LM Studio")
    models.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    models.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    models.set_defaults(run=run_models)
    rm = sub.add_parser("rm", help="delete a model that `toolserve pull` downloaded (never another program's files)")
    rm.add_argument("reference", help="owner/repo (all its files), owner/repo:QUANT or hf://owner/repo/FILE.gguf")
    rm.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    rm.set_defaults(run=run_rm)


def mb(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def run_pull(args: argparse.Namespace) -> int:
    from toolserve.errors import ModelLoadError
    from toolserve.models.files import model_bytes
    from toolserve.models.resolve import resolve

    if not is_reference(parse(args.reference)):
        raise ModelLoadError(f"{args.reference} is a path, not a model reference (owner/repo[:QUANT], hf://owner/repo/FILE.gguf)")
    got = resolve(args.reference, offline=args.offline, token=args.hf_token)
    what = "downloaded" if got.downloaded else "already on disk"
    parts = f" in {len(got.parts)} parts" if len(got.parts) > 1 else ""
    print(f"{args.reference}: {what}, {got.path} ({mb(model_bytes(got.path))}{parts})")
    if got.mmproj is not None:
        print(f"{args.reference}: projector {got.mmproj}")
    return 0


COLUMNS = ("reference", "size", "architecture", "quantization", "context_length", "tool_format", "vision", "path")


def _cell(row: dict[str, Any], key: str) -> str:
    if key == "size":
        return mb(row["size_bytes"])
    value = row.get(key)
    if key == "vision":
        return "yes" if value else "no"
    return "-" if value is None else str(value)


def run_models(args: argparse.Namespace) -> int:
    from toolserve.models.catalog import describe, on_disk

    rows = [describe(item) for item in on_disk()]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print("no models on disk: `toolserve pull owner/repo[:QUANT]` downloads one (Ollama's and LM Studio's are listed too)", file=sys.stderr)
        return 0
    heads = {"context_length": "context", "quantization": "quant", "tool_format": "tools", "architecture": "arch"}
    table = [[heads.get(c, c).upper() for c in COLUMNS], *[[_cell(r, c) for c in COLUMNS] for r in rows]]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    for line in table:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)), line[-1]]))
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from toolserve.models.catalog import remove

    for name in remove(args.reference):
        print(f"deleted {name}")
    return 0
