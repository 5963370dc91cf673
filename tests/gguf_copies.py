"""Copies of a GGUF written with the `gguf` package (no download): the same tensors split into
parts as llama.cpp's gguf-split writes them (NAME-00001-of-0000N.gguf: the first part holds
every key, each part `split.no`, `split.count`, `split.tensors.count` and its own tensors), or
with extra header keys (e.g. `general.sampling.*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf


def _copy(src: Path, writer: gguf.GGUFWriter, extra: dict[str, Any]) -> None:
    reader = gguf.GGUFReader(src)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF.") or f.name in extra:
            continue
        kind = f.types[0]
        sub = f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), kind, sub_type=sub)
    for key, value in extra.items():
        kind = gguf.GGUFValueType.INT32 if isinstance(value, int) else gguf.GGUFValueType.FLOAT32 if isinstance(value, float) else gguf.GGUFValueType.STRING
        writer.add_key_value(key, value, kind)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _arch(src: Path) -> str:
    field = gguf.GGUFReader(src).fields["general.architecture"]
    return bytes(field.parts[field.data[0]]).decode()


def with_keys(src: Path, out: Path, extra: dict[str, Any]) -> Path:
    """A copy of `src` with `extra` header keys added (or replaced)."""
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        _copy(src, gguf.GGUFWriter(tmp, _arch(src)), extra)
        tmp.rename(out)
    return out


def split(src: Path, out_dir: Path, stem: str, parts: int) -> list[Path]:
    """`src` split into `parts` files named STEM-0000i-of-0000N.gguf in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [out_dir / f"{stem}-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    if all(p.exists() for p in names):
        return names
    count = len(gguf.GGUFReader(src).tensors)
    writer = gguf.GGUFWriter(out_dir / f"{stem}.gguf", _arch(src), split_max_tensors=-(-count // parts))
    _copy(src, writer, {})
    found = sorted(out_dir.glob(f"{stem}-*-of-*.gguf"))
    assert [p.name for p in found] == [p.name for p in names], found
    return names
