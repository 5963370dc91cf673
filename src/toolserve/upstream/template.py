"""The chat template raw mode renders with, taken from where the upstream's model came from: a
model directory on this machine, or a Hugging Face repo (read through huggingface_hub's cache,
downloaded unless offline), as vLLM itself reads it: `chat_template.jinja`, else the
`chat_template` of `tokenizer_config.json` (of named ones, `tool_use` first: raw mode renders
tools)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

from toolserve.formats.template import tokenizer_config_template

log = logging.getLogger("toolserve.upstream")
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
FILES = ("chat_template.jinja", "tokenizer_config.json")


def model_template(where: str, *, offline: bool = False, token: str | None = None) -> tuple[str, str] | None:
    """(source, label) of the chat template of the model directory or repo id `where`; None
    where it gives none (no such directory or repo, offline and not cached, no template)."""
    path = Path(where).expanduser()
    if path.is_dir():
        return _read(lambda name: path / name if (path / name).is_file() else None, f"dir:{path}")
    if not REPO_ID.fullmatch(where) or path.exists():
        return None
    from huggingface_hub import hf_hub_download

    from toolserve.models.hubcache import offline_env

    def fetch(name: str) -> Path | None:
        try:
            return Path(hf_hub_download(where, name, token=token, local_files_only=offline or offline_env()))
        except Exception as exc:  # not there, not cached, unreachable: the next file, or no template
            log.info("chat template of %s: no %s (%s)", where, name, type(exc).__name__)
            return None

    return _read(fetch, f"hub:{where}")


def _read(get: Callable[[str], Path | None], label: str) -> tuple[str, str] | None:
    for name in FILES:
        found = get(name)
        if found is None:
            continue
        try:
            text = found.read_text("utf-8")
            source = text if name.endswith(".jinja") else tokenizer_config_template(json.loads(text), prefer="tool_use")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.warning("chat template: cannot read %s: %s", found, exc)
            continue
        if source:
            return source, f"{label}/{name}"
    return None
