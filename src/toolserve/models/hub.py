"""GGUF models from the Hugging Face Hub, downloaded through huggingface_hub into its standard
cache (HF_HOME respected, so llama.cpp, transformers and others share the files).

One listing of the repo (`model_info` with file sizes and LFS ids) chooses the files
(models/choose.py); each is fetched with `hf_hub_download`, which resumes an interrupted
download from its `.incomplete` file with a Range request; an interruption in the middle is
retried here (resuming) a few times. Every file's checksum is checked before its first use
(models/hubcache.py). Offline (`--offline`, HF_HUB_OFFLINE=1) only the cache is read; when the
Hub cannot be reached, a copy in the cache is used with a warning.

On a terminal huggingface_hub draws its progress bars (size, rate, time left); otherwise a log
line marks every 10% of each file.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolserve.errors import ModelLoadError
from toolserve.models import hubcache
from toolserve.models.choose import Choice, choose, choose_file
from toolserve.models.refs import HubFile, HubRepo, canonical

log = logging.getLogger(__name__)

RETRIES = 5  # attempts at a file whose download is cut off (each resumes where the last stopped)


@dataclass(frozen=True)
class Fetched:
    files: tuple[Path, ...]  # the model: one file or every part, as paths in the cache's snapshot
    mmproj: Path | None
    downloaded: bool  # whether anything was downloaded now


def endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def fetch(ref: HubRepo | HubFile, *, offline: bool = False, token: str | None = None) -> Fetched:
    """The files of `ref` in the cache, downloaded first unless offline."""
    # huggingface_hub 1.x and later log each HTTP request at info through their httpx fork
    for name in ("httpx2", "httpcore2"):
        if logging.getLogger(name).getEffectiveLevel() > logging.DEBUG:
            logging.getLogger(name).setLevel(logging.WARNING)
    name = canonical(ref)
    if offline or hubcache.offline_env():
        why = "--offline" if offline else "HF_HUB_OFFLINE=1"
        return _cached(ref, f"{why} allows no download: run `toolserve pull {name}` where the Hub can be reached")
    try:
        listing = _listing(ref.repo, token)
    except _Unreachable as exc:
        try:
            found = _cached(ref, "")
        except ModelLoadError:
            raise ModelLoadError(f"cannot reach the Hugging Face Hub at {endpoint()} to fetch {name} ({exc}), and it is not in the cache") from None
        log.warning("cannot reach the Hugging Face Hub at %s (%s): using %s from the cache", endpoint(), exc, name)
        return found
    names = [s.rfilename for s in listing.siblings or []]
    choice = choose_file(names, ref.file, ref.repo) if isinstance(ref, HubFile) else choose(names, ref.quant, ref.repo)
    ids = {s.rfilename: (s.size, s.lfs.sha256 if s.lfs else s.blob_id) for s in listing.siblings or []}
    wanted = [*choice.files, *([choice.mmproj] if choice.mmproj else [])]
    paths, downloaded = [], False
    for file in wanted:
        size, oid = ids.get(file, (None, None))
        path, new = _download(ref.repo, file, token, size, oid)
        paths.append(path)
        downloaded = downloaded or new
    return Fetched(tuple(paths[: len(choice.files)]), paths[-1] if choice.mmproj else None, downloaded)


def _cached(ref: HubRepo | HubFile, advice: str) -> Fetched:
    """The files of `ref` as the cache holds them (no network)."""
    name = canonical(ref)
    snap = hubcache.snapshot(ref.repo)
    if snap is None:
        raise ModelLoadError(f"{name} is not in the Hugging Face cache {hubcache.hub_cache()}" + (f"; {advice}" if advice else ""))
    try:
        choice: Choice = (
            choose_file(list(snap.names), ref.file, ref.repo) if isinstance(ref, HubFile) else choose(list(snap.names), ref.quant, ref.repo)
        )
    except ModelLoadError as exc:
        raise ModelLoadError(f"in the Hugging Face cache, {exc.message}" + (f"; {advice}" if advice else "")) from None
    for file in [*choice.files, *([choice.mmproj] if choice.mmproj else [])]:
        hubcache.verify(ref.repo, file, snap.path / file)
    mmproj = snap.path / choice.mmproj if choice.mmproj else None
    return Fetched(tuple(snap.path / f for f in choice.files), mmproj, False)


class _Unreachable(Exception):
    """No answer from the Hub (no route, DNS, timeout): the cache may still serve."""


def _listing(repo: str, token: str | None) -> Any:
    from huggingface_hub import HfApi

    try:
        return HfApi(endpoint=endpoint()).model_info(repo, files_metadata=True, token=token)
    except Exception as exc:
        if _transient(exc):
            raise _Unreachable(_reason(exc)) from None
        raise hub_error(exc, repo, token) from None


def _download(repo: str, file: str, token: str | None, size: int | None, oid: str | None) -> tuple[Path, bool]:
    """One file into the cache (resumed after an interruption), checked; whether it was downloaded now."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    blob = hubcache.blob_path(repo, oid) if oid else None
    had = blob is not None and blob.is_file()
    tty = sys.stderr.isatty()
    enable_progress_bars() if tty else disable_progress_bars()
    watch = _Progress(blob, size, f"{repo}/{file}") if blob is not None and size and not had and not tty else None
    if not had:
        log.info("downloading %s/%s from %s (%.0f MB)", repo, file, endpoint(), (size or 0) / 1e6)
    try:
        for attempt in range(1, RETRIES + 1):
            try:
                path = Path(hf_hub_download(repo, file, revision="main", token=token))
                break
            except Exception as exc:
                if not _transient(exc) or attempt == RETRIES:
                    if _transient(exc):
                        raise ModelLoadError(f"downloading {repo}/{file} failed {RETRIES} times ({_reason(exc)}); run the command again to resume it") from None
                    raise hub_error(exc, repo, token) from None
                log.warning("downloading %s/%s was interrupted (%s); resuming", repo, file, _reason(exc))
                time.sleep(min(2**attempt, 10))
    finally:
        if watch is not None:
            watch.stop()
    hubcache.verify(repo, file, path)
    if not had:
        hubcache.mark_pulled(repo, file, path.resolve().name)
    return path, not had


def _transient(exc: BaseException) -> bool:
    """A connection that failed or broke off (requests' errors are OSErrors; httpx's live in httpx)."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if isinstance(exc, HfHubHTTPError):
        return False
    if isinstance(exc, LocalEntryNotFoundError):  # no answer to the HEAD, and nothing cached
        return exc.__cause__ is not None and _transient(exc.__cause__)
    # a full disk or a folder that cannot be written is not worth a retry: those are said at once
    return isinstance(exc, ConnectionError | TimeoutError) or type(exc).__module__.startswith(("httpx", "httpcore", "requests", "urllib3"))


_CAUSES = (
    ("NameResolutionError", "its host name does not resolve"), ("Failed to resolve", "its host name does not resolve"),
    ("Connection refused", "connection refused"), ("timed out", "timed out"), ("IncompleteRead", "the connection broke off"),
    ("Connection broken", "the connection broke off"), ("Connection reset", "the connection was reset"),
)


def _reason(exc: BaseException) -> str:
    """A short cause: requests' and urllib3's messages nest the whole retry story."""
    text = " ".join(str(exc).split())
    for needle, said in _CAUSES:
        if needle in text:
            return said
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def hub_error(exc: BaseException, repo: str, token: str | None) -> ModelLoadError:
    """One line for what the Hub refused, and what to do about it."""
    from huggingface_hub import get_token
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, ModelLoadError):
        return exc
    page = f"{endpoint()}/{repo}"
    sent = bool(token or get_token())
    status = getattr(getattr(exc, "response", None), "status_code", None)
    how = "pass a token with HF_TOKEN=hf_... or --hf-token (https://huggingface.co/settings/tokens)"
    if isinstance(exc, GatedRepoError):
        if status == 403 or sent:
            return ModelLoadError(f"{repo} is gated and the token sent has no access to it ({status}): ask for access at {page} (a fine-grained token also needs read access to public gated repos)")
        return ModelLoadError(f"{repo} is gated ({status}): accept its conditions at {page}, then {how}")
    if isinstance(exc, RepositoryNotFoundError):
        if sent:
            return ModelLoadError(f"{repo} was not found on the Hugging Face Hub ({status}), or the token sent cannot read it: check the name at {page}")
        return ModelLoadError(f"{repo} was not found on the Hugging Face Hub ({status}); if it is private or gated, {how}")
    if isinstance(exc, RevisionNotFoundError | EntryNotFoundError):
        return ModelLoadError(f"{repo} changed on the Hub while it was fetched ({type(exc).__name__}); run the command again")
    if isinstance(exc, HfHubHTTPError):
        if status == 401:
            return ModelLoadError(f"the Hugging Face Hub refused the token (401, invalid credentials) for {repo}: check HF_TOKEN / --hf-token")
        if status == 403:
            return ModelLoadError(f"the Hugging Face Hub refused access to {repo} (403): check that the token may read it at {page}")
        message = getattr(exc, "server_message", None) or _reason(exc)
        return ModelLoadError(f"the Hugging Face Hub answered {status} for {repo}: {' '.join(str(message).split())[:200]}")
    return ModelLoadError(f"fetching {repo} failed: {_reason(exc)}")


class _Progress:
    """A log line at every 10% of a download, read from the size of its `.incomplete` file
    (for logs that are not a terminal, where progress bars would be noise)."""

    def __init__(self, blob: Path, total: int, label: str):
        self.partial, self.blob, self.total, self.label = Path(f"{blob}.incomplete"), blob, total, label
        self.started, self.first = time.monotonic(), self._size()
        self.mark = 10 * (self.first * 10 // total) + 10  # the next 10% to log (a resumed download starts at its own)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _size(self) -> int:
        for path in (self.partial, self.blob):
            try:
                return path.stat().st_size
            except OSError:
                continue
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.5) and self.mark <= 100:
            self._line()

    def _line(self) -> None:
        done = self._size()
        if done * 100 < self.mark * self.total:
            return
        rate = (done - self.first) / max(time.monotonic() - self.started, 1e-3)
        left = (self.total - done) / rate if rate > 0 else 0.0
        log.info(
            "%s: %d%% (%.0f of %.0f MB, %.1f MB/s, %.0f s left)",
            self.label, done * 100 // self.total, done / 1e6, self.total / 1e6, rate / 1e6, left,
        )
        self.mark = 10 * (done * 10 // self.total) + 10

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._line()  # a download quicker than a poll still says it finished
