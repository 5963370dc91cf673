"""The Hugging Face cache as toolserve reads and writes it without the network
(models/hubcache.py): checksums before first use, the ledger of what toolserve downloaded,
and deleting only that."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from toolserve.errors import ModelLoadError
from toolserve.models import hubcache

REPO = "org/m-GGUF"
COMMIT = "c" * 40


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("TOOLSERVE_CACHE_DIR", str(tmp_path / "toolserve"))
    return tmp_path / "hub" / "models--org--m-GGUF"


def put(cache: Path, name: str, data: bytes, *, oid: str | None = None, commit: str = COMMIT) -> Path:
    """A file as huggingface_hub caches it: a blob named by its id, a snapshot link to it."""
    oid = oid or hashlib.sha256(data).hexdigest()
    blob = cache / "blobs" / oid
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = cache / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (cache / "refs").mkdir(exist_ok=True)
    (cache / "refs" / "main").write_text(commit)
    return link


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("kind", ["sha256", "git"])
def test_a_file_that_matches_its_id_is_checked_once(cache: Path, kind: str) -> None:
    data = b"GGUF" + bytes(1000)
    link = put(cache, "a.gguf", data, oid=git_oid(data) if kind == "git" else None)
    hubcache.verify(REPO, "a.gguf", link)
    blob = link.resolve()
    stat = blob.stat()
    blob.write_bytes(b"X" * len(data))  # same size, same mtime: the record says it was checked
    os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    hubcache.verify(REPO, "a.gguf", link)
    os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched since: checked again
    with pytest.raises(ModelLoadError, match="does not match its checksum"):
        hubcache.verify(REPO, "a.gguf", link)


def test_a_file_that_does_not_match_is_deleted(cache: Path) -> None:
    link = put(cache, "a.gguf", b"GGUF good", oid=hashlib.sha256(b"GGUF other").hexdigest())
    blob = link.resolve()
    with pytest.raises(ModelLoadError) as err:
        hubcache.verify(REPO, "a.gguf", link)
    assert f"{REPO}/a.gguf: the downloaded file does not match its checksum (sha256 " in err.value.message
    assert "it was deleted and not used" in err.value.message
    assert not blob.exists() and not link.is_symlink()


def test_snapshot_follows_refs_main(cache: Path) -> None:
    put(cache, "old.gguf", b"1", commit="a" * 40)
    put(cache, "new.gguf", b"2", commit="b" * 40)
    (cache / "refs" / "main").write_text("a" * 40)
    snap = hubcache.snapshot(REPO)
    assert snap is not None and (snap.commit, snap.names) == ("a" * 40, ("old.gguf",))
    assert hubcache.snapshot("org/absent") is None
    assert hubcache.repos() == [REPO]


def test_remove_deletes_only_what_toolserve_pulled_and_then_the_repo(cache: Path) -> None:
    mine = put(cache, "m-Q4_K_M.gguf", b"GGUF mine")
    theirs = put(cache, "m-Q8_0.gguf", b"GGUF theirs")
    hubcache.mark_pulled(REPO, "m-Q4_K_M.gguf", mine.resolve().name)
    assert hubcache.pulled(REPO, mine) and not hubcache.pulled(REPO, theirs)
    assert hubcache.remove(REPO, ["m-Q4_K_M.gguf", "m-Q8_0.gguf"]) == ["m-Q4_K_M.gguf"]
    assert not mine.is_symlink() and theirs.resolve().is_file()
    hubcache.mark_pulled(REPO, "m-Q8_0.gguf", theirs.resolve().name)
    assert hubcache.remove(REPO, ["m-Q8_0.gguf"]) == ["m-Q8_0.gguf"]
    assert not cache.exists()  # no file left: the repo's folder goes too


def test_a_blob_two_snapshots_share_stays_until_the_last_goes(cache: Path) -> None:
    first = put(cache, "m.gguf", b"GGUF same", commit="a" * 40)
    second = put(cache, "m.gguf", b"GGUF same", commit="b" * 40)
    hubcache.mark_pulled(REPO, "m.gguf", first.resolve().name)
    (cache / "refs" / "main").write_text("a" * 40)
    assert hubcache.remove(REPO, ["m.gguf"]) == ["m.gguf"]
    assert second.resolve().is_file()  # the other revision still points at it
