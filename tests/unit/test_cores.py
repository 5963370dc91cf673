"""Shares of the cores (engine/cores.py): when they are needed, each engine's share, how
engines see each other busy, and which engines the server counts (cli._core_shares)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolserve import cli
from toolserve.engine import cores
from toolserve.engine.cores import Shares


@pytest.mark.parametrize(
    ("threads", "n_cores", "needed"),
    [
        ([], 2, False),
        ([2], 2, False),  # one engine: nothing to take turns with
        ([8], 2, False),
        ([1, 1], 2, False),  # the cores split between them
        ([2, 1], 2, True),
        ([2, 2], 2, True),
        ([8, 8], 16, False),
        ([8, 8, 1], 16, True),
    ],
)
def test_shares_are_needed_when_threads_outnumber_the_cores(threads: list[int], n_cores: int, needed: bool) -> None:
    assert cores.needed(threads, n_cores) is needed


@pytest.mark.parametrize(
    ("mine", "others", "n_cores", "threads"),
    [
        (2, [], 2, 2),  # alone: all of its threads
        (2, [2], 2, 1),
        (1, [1], 2, 1),  # the cores suffice: nothing changes
        (4, [4], 4, 2),
        (8, [1], 8, 7),
        (1, [8], 8, 1),  # at least one thread
        (16, [16, 16], 16, 5),
        (2, [2, 2], 2, 1),  # more engines than cores: one thread each
    ],
)
def test_a_share_is_the_engines_part_of_the_cores(mine: int, others: list[int], n_cores: int, threads: int) -> None:
    assert cores.share(mine, others, n_cores) == threads


@given(st.lists(st.integers(1, 64), min_size=1, max_size=8), st.integers(1, 64))
def test_shares_stay_within_the_cores(threads: list[int], n_cores: int) -> None:
    shares = [cores.share(t, threads[:i] + threads[i + 1 :], n_cores) for i, t in enumerate(threads)]
    assert all(1 <= s <= t for s, t in zip(shares, threads, strict=True))
    if sum(threads) <= n_cores:
        assert shares == threads
    else:  # only the engines held up to one thread can take more than the cores
        assert sum(s for s in shares if s > 1) <= n_cores


def threads(engine: Shares) -> int:
    with engine.computing() as n:
        return n


def test_without_a_directory_an_engine_keeps_its_threads() -> None:
    alone = Shares(None, 4, n_cores=2)
    alone.busy(True)
    assert threads(alone) == 4 and alone.shared == 0
    alone.close()


def test_an_engine_whose_directory_is_gone_computes_as_if_alone(tmp_path: Path) -> None:
    gone = tmp_path / "removed"
    engine = Shares(str(gone), 2, n_cores=2)
    engine.busy(True)
    assert threads(engine) == 2
    with engine.alone():
        pass
    engine.close()


def test_prepare_without_a_place_for_the_directory_shares_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cores, "_shared", None)
    monkeypatch.setattr(cores, "count", lambda: 2)
    monkeypatch.setattr(cores.tempfile, "tempdir", str(tmp_path / "missing"))
    assert cores.prepare([2, 2]) is None and cores.shared() is None


def test_busy_engines_split_the_cores_and_get_them_back(tmp_path: Path) -> None:
    a, b = Shares(str(tmp_path), 2, n_cores=2), Shares(str(tmp_path), 2, n_cores=2)
    assert (threads(a), threads(b)) == (2, 2)  # neither busy
    a.busy(True)
    assert threads(b) == 1 and b.shared == 1
    assert threads(a) == 2  # b has no work
    b.busy(True)
    assert (threads(a), threads(b)) == (1, 1)
    a.busy(False)
    assert threads(b) == 2 and b.shared == 2
    a.close()
    b.close()
    assert list(tmp_path.iterdir()) == [tmp_path / cores.HOLD]  # each engine's own files go with it


def test_the_context_is_set_only_when_its_threads_change(tmp_path: Path) -> None:
    applied: list[int] = []
    a, b = Shares(str(tmp_path), 2, n_cores=2, apply=applied.append), Shares(str(tmp_path), 2, n_cores=2)
    a.busy(True)
    threads(a)
    b.busy(True)
    threads(a)
    threads(a)
    with a.alone():  # on all its threads
        pass
    threads(a)
    b.busy(False)
    threads(a)
    assert applied == [1, 2, 1, 2]
    a.close()
    b.close()


def test_an_engine_that_came_later_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "RESCAN", 1e9)
    a = Shares(str(tmp_path), 2, n_cores=2)
    assert threads(a) == 2  # looked once: no one else
    b = Shares(str(tmp_path), 2, n_cores=2)
    b.busy(True)
    assert threads(a) == 2  # not looked again yet
    monkeypatch.setattr(cores, "RESCAN", 0.0)
    assert threads(a) == 1
    b.close()
    assert threads(a) == 2
    a.close()


def test_an_engine_becoming_busy_waits_for_a_computation_begun_on_all_threads(tmp_path: Path) -> None:
    """b becomes busy while a computes on the threads it chose alone: b starts computing only
    after that computation, and a's next one is on its share."""
    a, b = Shares(str(tmp_path), 2, n_cores=2), Shares(str(tmp_path), 2, n_cores=2)
    a.busy(True)
    threads(b)  # b has looked: it knows a
    order: list[str] = []
    became_busy = threading.Thread(target=lambda: (b.busy(True), order.append("b busy")))
    with a.computing() as n:
        assert n == 2
        became_busy.start()
        while became_busy.is_alive() and not blocked_on(tmp_path / f"{a.name}.run"):  # b waits for this computation
            became_busy.join(0.01)
        order.append("a computed")
    became_busy.join()
    assert order == ["a computed", "b busy"]
    assert (threads(a), threads(b)) == (1, 1)
    a.close()
    b.close()


def test_a_computation_alone_waits_for_the_others_and_holds_them(tmp_path: Path) -> None:
    """An image encoder cannot change its threads: it waits for the busy engines' current
    computations, and their next ones wait for it."""
    a, b = Shares(str(tmp_path), 2, n_cores=2), Shares(str(tmp_path), 2, n_cores=2)
    a.busy(True)
    b.busy(True)
    order: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def encode() -> None:
        with b.alone():
            order.append("b alone")
            inside.set()
            release.wait()
            order.append("b done")

    encoder = threading.Thread(target=encode)
    with a.computing():
        encoder.start()
        while encoder.is_alive() and not inside.is_set() and not blocked_on(tmp_path / f"{a.name}.run"):
            encoder.join(0.01)
        order.append("a computed")
    inside.wait()
    decoder = threading.Thread(target=lambda: order.append(f"a computes on {threads(a)}"))
    decoder.start()
    while decoder.is_alive() and not blocked_on(tmp_path / cores.HOLD):
        decoder.join(0.01)
    release.set()
    decoder.join()
    encoder.join()
    assert order == ["a computed", "b alone", "b done", "a computes on 1"]
    a.close()
    b.close()


def blocked_on(path: Path) -> bool:
    """Whether a flock waiter is blocked on the file now (/proc/locks: '->' lines name the inode)."""
    inode = path.stat().st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and "FLOCK" in line and line.split()[-3].endswith(f":{inode}") for line in lines)


def test_a_dead_process_gives_its_share_back(tmp_path: Path) -> None:
    """An engine process killed while busy: the kernel drops its lock, the others take the cores."""
    path = tmp_path / "999999-0-2"
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            f"import fcntl, os, sys; os.close(os.open({str(path)!r} + '.run', os.O_RDWR | os.O_CREAT)); "
            f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('busy', flush=True); sys.stdin.read()"
        )],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "busy"
        mine = Shares(str(tmp_path), 2, n_cores=2)
        assert threads(mine) == 1
        holder.kill()
        holder.wait()
        assert threads(mine) == 2
        mine.busy(True)  # a dead engine has nothing to wait for
        mine.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_prepare_makes_the_directory_only_when_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "_shared", None)
    monkeypatch.setattr(cores, "count", lambda: 2)
    assert cores.prepare([2]) is None and cores.prepare([1, 1]) is None and cores.shared() is None
    path = cores.prepare([2, 2])
    try:
        assert path is not None and os.path.isdir(path) and cores.shared() == path
    finally:
        if path:
            os.rmdir(path)


def counted(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[int] | None:
    """The engines' threads `toolserve serve ARGV` hands to cores.prepare (None: not called)."""
    seen: list[list[int]] = []
    monkeypatch.setattr(cores, "prepare", lambda threads: seen.append(list(threads)))
    monkeypatch.setattr(cores.os, "cpu_count", lambda: 4)  # the CPUs engines default their threads to
    cli._core_shares(cli.build_parser().parse_args(["serve", *argv]))
    return seen[0] if seen else None


def test_the_server_counts_each_local_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert counted(monkeypatch, []) == [4]  # one model on all the cores
    assert counted(monkeypatch, ["--embeddings"]) == [4, 4]  # and its embedding context
    assert counted(monkeypatch, ["--threads", "2", "--embeddings"]) == [2, 2]
    assert counted(monkeypatch, ["--embedding-model", "minilm.gguf"]) == [4, 4]
    assert counted(monkeypatch, ["--upstream", "http://gpu-box:8000"]) == []
    assert counted(monkeypatch, ["--no-core-shares", "--embeddings"]) is None
    models = tmp_path / "models.yaml"
    models.write_text(
        "models:\n"
        "  - id: a\n    threads: 1\n"
        "  - id: b\n    embeddings: true\n"
        "  - id: c\n    url: http://gpu-box:8000\n"
    )
    assert counted(monkeypatch, ["--config", str(models)]) == [1, 4, 4]
