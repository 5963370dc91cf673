"""Shares of the cores: the local engines of one server that are busy at the same time split
the cores between them, when their threads would add up to more than the cores.

llama.cpp's threads wait for each other in spin barriers at every step of a graph. Two engines
computing at once with more threads than there are cores each wait for threads the other has
descheduled, and both slow down many times over: two 2-thread SmolLM2 engines on 2 cores
streamed 147 tokens/s alone and under 2 each at the same time. Taking turns on all the cores
avoids that but leaves both at half speed; each on a share of the cores, computing at the same
time, does better (SmolLM2 streams as fast on one thread as on two).

So when the server may run several local engines (models, embedding contexts) whose threads
outnumber the cores, it makes a directory (`prepare`). Each engine puts a file there, named for
its threads, and holds an exclusive `flock` on it while it has work (`Shares.busy`); the kernel
drops the lock of a process that dies. Before each computation an engine sees which of the
others hold theirs (a shared lock that fails) and computes on its share of the cores: its
threads times the cores over the busy engines' threads, at least 1 (`share`). Alone, it gets all
of its threads back. An engine that becomes busy first waits for the others' computations that
began before they could see it (`Shares`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

log = logging.getLogger(__name__)

RESCAN = 0.5  # seconds between looks for engines that came or went
HOLD = "hold"  # the file an engine computing alone holds
_shared: str | None = None  # the server's directory, once `prepare` made one
_ids = itertools.count()


def count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def threads(asked: int | None) -> int:
    """The threads an engine computes on: those asked for, else one per CPU of the machine."""
    return asked or os.cpu_count() or 1


def needed(threads: Sequence[int], n_cores: int) -> bool:
    """Whether engines computing on `threads` threads each must share `n_cores` cores."""
    return len(threads) > 1 and sum(threads) > n_cores


def share(mine: int, busy_others: Sequence[int], n_cores: int) -> int:
    """The threads an engine of `mine` threads computes on while engines of `busy_others`
    threads are busy too: its part of the cores in proportion to the threads asked for."""
    asked = mine + sum(busy_others)
    if asked <= n_cores:
        return mine
    return max(1, n_cores * mine // asked)


def prepare(threads: Sequence[int]) -> str | None:
    """Server side, before any engine starts: when the engines (`threads` each) must share the
    cores, make the directory (removed when the server exits) that `shared` gives from then on.
    None when they need not."""
    global _shared
    if not needed(threads, count()):
        return None
    try:
        _shared = tempfile.mkdtemp(prefix="toolserve-cores-")
    except OSError as exc:
        log.warning("local engines busy at once cannot share the cores: no directory for it (%s)", exc)
        return None
    atexit.register(shutil.rmtree, _shared, True)
    log.info("local engines busy at once share the %d cores (%s threads)", count(), "+".join(map(str, threads)))
    return _shared


def shared() -> str | None:
    return _shared


class Shares:
    """One engine's side: `busy(True)` while it has work, `computing()` around each computation,
    which sets the context's threads for it. Without a directory it always computes on its own
    threads.

    Each engine has two files: NAME, locked while it is busy, and NAME.run, locked while it
    computes. An engine that becomes busy waits for the computations of the others that are
    busy to end (a shared lock on their .run): one of them may have begun on all of its threads
    before it saw this engine busy, and a computation with more threads than it has cores can
    last as long as the other engine stays busy.

    A computation whose threads cannot be changed (libmtmd's image encoder) runs `alone()`: it
    holds HOLD, which stops the others before their next computation, and waits for their
    current ones to end."""

    def __init__(
        self, directory: str | None, threads: int, n_cores: int | None = None, apply: Callable[[int], None] = lambda n: None,
    ):
        """`apply(n)` sets the engine's context to compute on n threads (llama_set_n_threads);
        it is called only when n changes."""
        self.directory = directory
        self.mine = threads
        self.cores = n_cores or count()
        self._apply = apply
        self._current = threads  # what the context computes on now
        self.shared = 0  # computations that ran on fewer threads because others were busy
        self._busy = False
        self._fd = self._run = self._hold = -1
        self._others: dict[str, tuple[int, int, int]] = {}  # name -> (our open file of NAME, of NAME.run, its threads)
        self._scanned = 0.0
        if directory is not None:
            self.name = f"{os.getpid()}-{next(_ids)}-{threads}"
            path = os.path.join(directory, self.name)
            try:
                self._hold = os.open(os.path.join(directory, HOLD), os.O_RDWR | os.O_CREAT, 0o600)
                self._run = os.open(path + ".run", os.O_RDWR | os.O_CREAT, 0o600)
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # last: others look for it
            except OSError as exc:  # the directory went away (a tmp cleaner): compute as if alone
                log.warning("this engine cannot share the cores with the others (%s); it computes on all its threads", exc)
                for fd in (self._hold, self._run):
                    if fd >= 0:
                        os.close(fd)
                self._fd = self._run = self._hold = -1

    def busy(self, on: bool) -> None:
        if self._fd < 0 or on == self._busy:
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX if on else fcntl.LOCK_UN)  # waits only for a probe's instant
        self._busy = on
        if on:
            self._look()
            self._wait_for_busy_others()  # a computation one began before it saw us busy ends first

    def _wait_for_busy_others(self) -> None:
        for fd, run, _ in self._others.values():
            if _held(fd):
                fcntl.flock(run, fcntl.LOCK_SH)
                fcntl.flock(run, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Around a computation on all of this engine's threads: the others wait meanwhile."""
        if self._fd < 0:
            yield
            return
        fcntl.flock(self._hold, fcntl.LOCK_EX)  # after another engine's alone(), if one runs
        try:
            self._look()
            self._wait_for_busy_others()
            self._use(self.mine)
            yield
        finally:
            fcntl.flock(self._hold, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def computing(self) -> Iterator[int]:
        """Around one computation: the threads to compute on now."""
        if self._fd < 0:
            yield self.mine
            return
        while True:
            fcntl.flock(self._run, fcntl.LOCK_EX)  # before looking: an engine that becomes busy after this waits for us
            if not _held(self._hold):
                break
            fcntl.flock(self._run, fcntl.LOCK_UN)  # another engine computes alone: wait for it
            fcntl.flock(self._hold, fcntl.LOCK_SH)
            fcntl.flock(self._hold, fcntl.LOCK_UN)
        try:
            self._look()
            n = share(self.mine, [t for fd, _, t in self._others.values() if _held(fd)], self.cores)
            if n < self.mine:
                self.shared += 1
            self._use(n)
            yield n
        finally:
            fcntl.flock(self._run, fcntl.LOCK_UN)

    def _use(self, n: int) -> None:
        if n != self._current:
            self._apply(n)
            self._current = n

    def _look(self) -> None:
        """List the others again when RESCAN seconds have passed."""
        if time.monotonic() - self._scanned < RESCAN:
            return
        assert self.directory is not None
        self._scanned = time.monotonic()
        try:
            names = {n for n in os.listdir(self.directory) if not n.endswith(".run")} - {self.name, HOLD}
        except OSError:
            names = set()
        for gone in set(self._others) - names:
            fd, run, _ = self._others.pop(gone)
            os.close(fd)
            os.close(run)
        for name in names - set(self._others):
            path = os.path.join(self.directory, name)
            try:
                threads = int(name.rsplit("-", 1)[1])
                run = os.open(path + ".run", os.O_RDONLY)
            except (ValueError, IndexError, OSError):
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                os.close(run)
                continue
            self._others[name] = (fd, run, threads)

    def close(self) -> None:
        for fd, run, _ in self._others.values():
            os.close(fd)
            os.close(run)
        self._others = {}
        if self._fd >= 0:
            os.close(self._fd)
            os.close(self._run)
            os.close(self._hold)
            self._fd = self._run = self._hold = -1
            assert self.directory is not None
            for suffix in ("", ".run"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, self.name + suffix))


def _held(fd: int) -> bool:
    """Whether the file's engine holds it (is busy): a shared lock of ours fails then."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False
