"""Turns on the cores (engine/cores.py): when they are needed, the lock between engines, and
which engines the server counts (cli._core_turns)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolserve import cli
from toolserve.engine import cores
from toolserve.engine.cores import Turns


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
def test_turns_are_needed_when_threads_outnumber_the_cores(threads: list[int], n_cores: int, needed: bool) -> None:
    assert cores.needed(threads, n_cores) is needed


def lock_file(tmp_path: Path) -> str:
    path = tmp_path / "turns"
    path.touch()
    return str(path)


def held(path: str) -> bool:
    """Whether some open file holds the lock now (a try from an open file of our own)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this try took
    return False


def blocked_waiters(path: str) -> int:
    """flock waiters blocked on the file now, from /proc/locks ('->' lines name the inode)."""
    inode = os.stat(path).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and "FLOCK" in line and line.split()[-3].endswith(f":{inode}"))


def test_without_a_lock_file_turns_do_nothing() -> None:
    turns = Turns(None)
    with turns, turns:  # not a lock at all: nesting does not wait
        pass
    assert turns.waits == 0
    turns.close()


def test_an_engine_waits_for_the_others_turn_and_counts_the_wait(tmp_path: Path) -> None:
    path = lock_file(tmp_path)
    first, second = Turns(path), Turns(path)  # two engines of one process: each its own open file
    order: list[str] = []

    def compute() -> None:
        with second:
            order.append("second computes")

    with first:
        assert held(path)
        worker = threading.Thread(target=compute)
        worker.start()
        while blocked_waiters(path) == 0:  # the second engine is asleep on the lock
            worker.join(0.01)
        order.append("first done")
    worker.join()
    assert order == ["first done", "second computes"]
    assert (first.waits, second.waits) == (0, 1)
    assert not held(path)
    with second:  # free again: no wait
        pass
    assert second.waits == 1
    first.close()
    second.close()


def test_a_dead_process_leaves_its_turn(tmp_path: Path) -> None:
    """An engine process killed inside a computation: the kernel drops its lock, the others go on."""
    path = lock_file(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl, os, sys; fd = os.open({path!r}, os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert held(path)
        holder.kill()
        holder.wait()
        turns = Turns(path)
        with turns:
            pass
        assert turns.waits == 0
        turns.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_prepare_makes_the_lock_file_and_shortens_openmp_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "_shared", None)
    monkeypatch.setattr(cores, "count", lambda: 2)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert cores.prepare([2]) is None and cores.shared() is None
    assert "GOMP_SPINCOUNT" not in os.environ
    path = cores.prepare([2, 2])
    try:
        assert path is not None and os.path.isfile(path) and cores.shared() == path
        assert os.environ["GOMP_SPINCOUNT"] == cores.SPINCOUNT
    finally:
        if path:
            os.unlink(path)


def test_prepare_keeps_the_users_own_spin_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "_shared", None)
    monkeypatch.setattr(cores, "count", lambda: 2)
    monkeypatch.setenv("GOMP_SPINCOUNT", "50000")
    path = cores.prepare([2, 2])
    assert path is not None
    os.unlink(path)
    assert os.environ["GOMP_SPINCOUNT"] == "50000"


def counted(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[int] | None:
    """The engines' threads `toolserve serve ARGV` hands to cores.prepare (None: not called)."""
    seen: list[list[int]] = []
    monkeypatch.setattr(cores, "prepare", lambda threads: seen.append(list(threads)))
    monkeypatch.setattr(cores, "count", lambda: 4)
    cli._core_turns(cli.build_parser().parse_args(["serve", *argv]))
    return seen[0] if seen else None


def test_the_server_counts_each_local_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert counted(monkeypatch, []) == [4]  # one model on all the cores
    assert counted(monkeypatch, ["--embeddings"]) == [4, 4]  # and its embedding context
    assert counted(monkeypatch, ["--threads", "2", "--embeddings"]) == [2, 2]
    assert counted(monkeypatch, ["--embedding-model", "minilm.gguf"]) == [4, 4]
    assert counted(monkeypatch, ["--upstream", "http://gpu-box:8000"]) == []
    assert counted(monkeypatch, ["--no-core-turns", "--embeddings"]) is None
    models = tmp_path / "models.yaml"
    models.write_text(
        "models:\n"
        "  - id: a\n    threads: 1\n"
        "  - id: b\n    embeddings: true\n"
        "  - id: c\n    url: http://gpu-box:8000\n"
    )
    assert counted(monkeypatch, ["--config", str(models)]) == [1, 4, 4]
