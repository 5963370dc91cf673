"""Turns on the cores: the local engines of one server take turns computing when their threads
add up to more than the cores.

llama.cpp's threads wait for each other in spin barriers at every step of a graph. Two engines
computing at once on the same cores each wait for threads the other has descheduled, and both
slow down many times over: two 2-thread SmolLM2 engines on 2 cores streamed 147 tokens/s alone
and under 2 each at the same time. So when the server may run several local engines (models,
embedding contexts) whose threads outnumber the cores, it makes a lock file (`prepare`), and
every engine holds it (`flock`, which engine processes share and the kernel releases when a
process dies) around each computation on the CPU: one engine computes at a time, on all the
cores. An engine waiting for its turn sleeps in the kernel. Its OpenMP threads, idle between
two computations, spin only briefly before sleeping (`GOMP_SPINCOUNT`, set for the server and
its engine processes unless the environment sets it), so they leave the cores to the engine
whose turn it is. A lone engine keeps its speed; two at once share it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Sequence
from types import TracebackType

log = logging.getLogger(__name__)

# OpenMP's idle threads spin this many times before they sleep. libgomp's default, 300,000,
# kept an idle engine's threads on the cores while another computed: with turns alone two
# engines streamed 38 and 36 tokens/s at once, with this too 62 and 59 (147 alone, unchanged)
SPINCOUNT = "1000"

_shared: str | None = None  # the server's lock file, once `prepare` made one


def count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def needed(threads: Sequence[int], n_cores: int) -> bool:
    """Whether engines computing on `threads` threads each need turns on `n_cores` cores."""
    return len(threads) > 1 and sum(threads) > n_cores


def prepare(threads: Sequence[int]) -> str | None:
    """Server side, before llama.cpp is loaded: when the engines (`threads` each) need turns,
    make the lock file (removed when the server exits) and shorten OpenMP's spinning. Returns
    the lock file's path, which `shared` also gives from then on; None when no turns are needed."""
    global _shared
    if not needed(threads, count()):
        return None
    fd, path = tempfile.mkstemp(prefix="toolserve-turns-")
    os.close(fd)
    atexit.register(_remove, path)
    os.environ.setdefault("GOMP_SPINCOUNT", SPINCOUNT)  # read when libgomp loads; engine processes inherit it
    _shared = path
    log.info("local engines take turns on the %d cores (%s threads)", count(), "+".join(map(str, threads)))
    return path


def shared() -> str | None:
    return _shared


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class Turns:
    """One engine's side of the lock: `with turns:` around a computation. Without a path it
    does nothing. Each Turns opens the file itself: flock excludes open files, so two engines
    in one process take turns too."""

    def __init__(self, path: str | None):
        self.path = path
        self.waits = 0  # computations that waited for another engine's turn to end
        self._fd = os.open(path, os.O_RDWR) if path else -1

    def __enter__(self) -> Turns:
        if self._fd >= 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.waits += 1
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
