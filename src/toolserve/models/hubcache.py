"""The Hugging Face hub cache (HF_HOME/hub, shared with every tool that uses huggingface_hub),
as toolserve reads and writes it without the network: a repo's files at the revision `main`
points to, the checksum of a blob before its first use, and the ledger of what toolserve itself
downloaded (so `toolserve rm` never deletes another tool's files).

Cache layout (huggingface_hub's): models--OWNER--REPO/{refs/main, snapshots/COMMIT/FILE -> ../../blobs/OID, blobs/OID}
where OID is the file's sha256 for files kept in Git LFS (all GGUFs on the Hub), else its git blob id.
toolserve's own records live under its cache folder (TOOLSERVE_CACHE_DIR, ~/.cache/toolserve):
hub/verified/FOLDER/OID (size and mtime of the blob when its checksum matched) and hub/pulled/FOLDER/OID
(the file names toolserve downloaded into that blob).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from toolserve.engine.repack import cache_dir
from toolserve.errors import ModelLoadError

log = logging.getLogger(__name__)

_OID = re.compile(r"^(?:[0-9a-f]{64}|[0-9a-f]{40})$")


def hub_cache() -> Path:
    """Where huggingface_hub keeps repos: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def folder_of(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def repo_of(folder: str) -> str | None:
    if not folder.startswith("models--"):
        return None
    return folder[len("models--") :].replace("--", "/", 1)


@dataclass(frozen=True)
class Snapshot:
    repo: str
    commit: str
    path: Path  # snapshots/COMMIT
    names: tuple[str, ...]  # files present, relative posix paths


def snapshot(repo: str) -> Snapshot | None:
    """The repo's files in the cache at the commit `refs/main` names (else the newest snapshot)."""
    storage = hub_cache() / folder_of(repo)
    snaps = storage / "snapshots"
    if not snaps.is_dir():
        return None
    try:
        commit = (storage / "refs" / "main").read_text().strip()
    except OSError:
        commit = ""
    path = snaps / commit if commit and (snaps / commit).is_dir() else None
    if path is None:
        candidates = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        if not candidates:
            return None
        path = candidates[-1]
    names = tuple(sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()))
    return Snapshot(repo, path.name, path, names)


def repos() -> list[str]:
    """The model repos in the cache."""
    root = hub_cache()
    if not root.is_dir():
        return []
    return sorted(r for r in (repo_of(p.name) for p in root.iterdir() if p.is_dir()) if r)


# -- checksums -------------------------------------------------------------------------------
def _record(kind: str, repo: str, oid: str) -> Path:
    return cache_dir() / "hub" / kind / folder_of(repo) / oid


def _stamp(blob: Path) -> str:
    st = blob.stat()
    return f"{st.st_size} {st.st_mtime_ns}"


def digest(blob: Path, oid: str) -> str:
    """The blob's id as the Hub computes it: sha256 for LFS files (64 hex), the git blob sha1 otherwise."""
    if len(oid) == 64:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1()
        h.update(f"blob {blob.stat().st_size}\0".encode())
    with blob.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify(repo: str, file: str, pointer: Path) -> None:
    """Check a downloaded file against its id before its first use (once per blob: a record
    keeps the size and mtime it had). A mismatch deletes the file and raises."""
    blob = pointer.resolve()
    oid = blob.name
    if not _OID.match(oid):
        log.warning("%s/%s: the cache holds it under %s, not under its checksum; not checked", repo, file, oid)
        return
    record = _record("verified", repo, oid)
    stamp = _stamp(blob)
    try:
        if record.read_text() == stamp:
            return
    except OSError:
        pass
    size = blob.stat().st_size
    log.info("%s/%s: checking its %s (%.0f MB)", repo, file, "sha256" if len(oid) == 64 else "git blob id", size / 1e6)
    got = digest(blob, oid)
    if got != oid:
        for path in (pointer, blob):
            path.unlink(missing_ok=True)
        kind = "sha256" if len(oid) == 64 else "git blob id"
        raise ModelLoadError(
            f"{repo}/{file}: the downloaded file does not match its checksum ({kind} {got[:16]}..., the Hub says "
            f"{oid[:16]}...): it was deleted and not used; run the command again to download it anew"
        )
    _write(record, stamp)


def _write(record: Path, text: str) -> None:
    """A record in toolserve's cache folder; one that cannot be written costs a hash next time
    (or, for the ledger, leaves the file to `hf cache delete`), never the start."""
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(text)
    except OSError as exc:
        log.warning("cannot write %s: %s", record, exc.strerror)


# -- what toolserve downloaded ---------------------------------------------------------------
def blob_path(repo: str, oid: str) -> Path:
    return hub_cache() / folder_of(repo) / "blobs" / oid


def mark_pulled(repo: str, file: str, oid: str) -> None:
    record = _record("pulled", repo, oid)
    names = set(record.read_text().split("\n")) if record.is_file() else set()
    _write(record, "\n".join(sorted((names | {file}) - {""})))


def pulled(repo: str, pointer: Path) -> bool:
    """Whether toolserve downloaded the blob behind `pointer`."""
    return _record("pulled", repo, pointer.resolve().name).is_file()


def remove(repo: str, names: list[str]) -> list[str]:
    """Delete `names` (snapshot paths) of `repo` that toolserve downloaded, with their blobs once
    no snapshot points at them, and the repo's folder once it holds no file. Returns what was
    deleted; files that toolserve did not download stay."""
    snap = snapshot(repo)
    if snap is None:
        return []
    storage = hub_cache() / folder_of(repo)
    removed = []
    for name in names:
        pointer = snap.path / name
        blob = pointer.resolve()
        if not pulled(repo, pointer):
            continue
        pointer.unlink()
        removed.append(name)
        still = [p for p in (storage / "snapshots").rglob("*") if p.is_symlink() and p.resolve() == blob]
        if not still:
            blob.unlink(missing_ok=True)
            for kind in ("pulled", "verified"):
                _record(kind, repo, blob.name).unlink(missing_ok=True)
    _prune(storage)
    return removed


def _prune(storage: Path) -> None:
    """Remove empty folders under the repo's snapshots, and the repo itself once no file is left."""
    for path in sorted((p for p in storage.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if "snapshots" in path.relative_to(storage).parts and not any(path.iterdir()):
            path.rmdir()
    files = [p for p in storage.rglob("*") if p.is_file() or p.is_symlink()]
    if all(p.parent.name in ("refs", ".no_exist") or ".no_exist" in p.parts for p in files):
        for p in sorted(storage.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
        storage.rmdir()


def offline_env() -> bool:
    """HF_HUB_OFFLINE=1 (huggingface_hub's own switch, read when it was imported)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
