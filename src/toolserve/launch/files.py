"""Writing an agent's configuration: TOML tables merged into a config.toml as text (the user's
comments, order and other tables stay), JSON objects merged key by key, and a backup of a user's
file before it changes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from toolserve.errors import ToolserveError
from toolserve.launch.agents import Tables

_HEADER = re.compile(r"^\s*\[(?!\[)\s*([^\]]+?)\s*\]\s*(#.*)?$")
_ARRAY_HEADER = re.compile(r"^\s*\[\[")
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    return key if _BARE.match(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    raise TypeError(f"no TOML form for {value!r} here")


def _path(header: str) -> tuple[str, ...]:
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([^.\s]+)', header)
    return tuple(json.loads(f'"{a}"') if a else b or c for a, b, c in parts)


def _sections(lines: list[str]) -> list[tuple[tuple[str, ...] | None, int, int]]:
    """(table path, first body line, end) of the root and each [table]; None for [[arrays]]."""
    out: list[tuple[tuple[str, ...] | None, int, int]] = []
    path: tuple[str, ...] | None = ()
    start = 0
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m or _ARRAY_HEADER.match(line):
            out.append((path, start, i))
            path, start = (_path(m.group(1)) if m else None), i + 1
    out.append((path, start, len(lines)))
    return out


def merge_toml(text: str, tables: Tables) -> str:
    """`text` with each key of `tables` set: its line replaced where the table has it, else
    added at the end of the table, which is added at the end of the file where missing."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for path, keys in tables.items():
        found = next(((s, e) for p, s, e in _sections(lines) if p == path), None)
        if found is None:
            if path == ():
                found = (0, 0)
            else:
                if lines and lines[-1].strip():
                    lines.append("\n")
                lines.append(f"[{'.'.join(toml_key(k) for k in path)}]\n")
                found = (len(lines), len(lines))
        start, end = found
        for key, value in keys.items():
            line = f"{toml_key(key)} = {toml_value(value)}\n"
            at = next((i for i in range(start, end) if re.match(rf"^\s*{re.escape(toml_key(key))}\s*=", lines[i])), None)
            if at is not None:
                lines[at] = line
                continue
            last = end
            while last > start and not lines[last - 1].strip():
                last -= 1  # after the table's last key, before the blank lines that end it
            lines.insert(last, line)
            end += 1
    return "".join(lines)


def check_toml(text: str, tables: Tables, where: Path) -> None:
    """The merged text parses and holds our values (a table the user wrote inline or with dotted
    keys cannot take a [table] of ours). Python 3.10 has no TOML reader: unchecked there."""
    try:
        import tomllib
    except ImportError:
        return
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ToolserveError(f"cannot merge toolserve's settings into {where}: {exc}; edit it by hand") from None
    for path, keys in tables.items():
        node: Any = data
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        for key, value in keys.items():
            if not isinstance(node, dict) or node.get(key) != value:
                raise ToolserveError(f"cannot merge toolserve's settings into {where}: {'.'.join((*path, key))} did not take; edit it by hand")


def codex_projects(text: str) -> Tables:
    """The [projects."PATH"] tables Codex wrote (which folders the user trusts), to keep when
    launch rewrites its own config.toml."""
    try:
        import tomllib

        projects = tomllib.loads(text).get("projects", {})
    except Exception:
        return {}
    return {("projects", p): v for p, v in projects.items() if isinstance(v, dict) and all(isinstance(x, str | bool | int) for x in v.values())}


def merge_json(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`old` with `patch` over it, objects merged key by key."""
    out = dict(old)
    for key, value in patch.items():
        out[key] = merge_json(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (ValueError, OSError) as exc:
        raise ToolserveError(f"cannot read {path}: {exc}; fix or move it") from None
    if not isinstance(data, dict):
        raise ToolserveError(f"{path} does not hold a JSON object; fix or move it")
    return data


def write(path: Path, text: str, *, backup: bool) -> Path | None:
    """Write `text` to `path` (its folder made). With `backup`, a file that changes is first
    copied beside it as NAME.toolserve-backup-TIME; returns that copy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = None
    if path.exists():
        old = path.read_bytes()
        if old == text.encode():
            return None
        if backup:
            saved = path.with_name(f"{path.name}.toolserve-backup-{time.strftime('%Y%m%d-%H%M%S')}")
            saved.write_bytes(old)
    path.write_text(text, encoding="utf-8")
    return saved
