"""An engine process: started, loaded, and how it ended.

`spawn` starts `python -m toolserve.engine.worker` with one end of two socketpairs (a Unix
socket: no copy through a broker, framing and pickling from multiprocessing.connection, EOF when
either side dies): the control connection, on which it sends the LlamaCppEngine's settings and
waits for the process's "ready" message (as long as loading takes), and the events connection.
`stop_reading` stops the event loop's reading of the events connection (from any thread).
`exit_reason` says in words how a dead process ended, `rss_mb` reads its resident memory (so
that an out-of-memory kill can say how much it held), `reported_error` turns an error the
process sent back into the exception it was. engine/remote.py supervises the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from toolserve import errors
from toolserve.errors import ModelLoadError, ToolserveError

log = logging.getLogger(__name__)


def reported_error(err: tuple[str, str] | None) -> BaseException | None:
    """An error the engine process reported, as the exception it was."""
    if err is None:
        return None
    name, message = err
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, ToolserveError):
        return cls(message)
    return errors.EngineFailure(message)


def rss_mb(pid: int) -> float | None:
    """The process's resident memory in MB (None when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def worker_env() -> dict[str, str]:
    """The engine process's environment: ours, its log at the level of the server's engine logs
    (`--log-level info` shows its lines from its start) unless TOOLSERVE_ENGINE_LOG says."""
    level = logging.getLevelName(logging.getLogger("toolserve.engine").getEffectiveLevel())
    return {"TOOLSERVE_ENGINE_LOG": level, **os.environ}


def spawn(settings: dict[str, Any], rss: float | None) -> tuple[subprocess.Popen[bytes], Connection, Connection, tuple[Any, ...]]:
    """Start an engine process; its control and events connections and its "ready" message.
    `rss`: the resident memory last seen (MB), named if the process is killed while loading."""
    ours, theirs = socket.socketpair()
    ev_ours, ev_theirs = socket.socketpair()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolserve.engine.worker", str(theirs.fileno()), str(ev_theirs.fileno())],
            pass_fds=[theirs.fileno(), ev_theirs.fileno()],
            start_new_session=True,  # a terminal's Ctrl-C goes to the server, which closes it
            env=worker_env(),
        )
    finally:
        theirs.close()
        ev_theirs.close()
    conn, events = Connection(ours.detach()), Connection(ev_ours.detach())
    try:
        conn.send(("load", settings))
        msg = conn.recv()  # as long as loading takes
    except (EOFError, OSError):
        conn.close()
        events.close()
        raise ModelLoadError(f"the engine process died while loading {settings['path']}: {exit_reason(proc, rss)}") from None
    if msg[0] != "ready":
        conn.close()
        events.close()
        proc.wait()
        raise ModelLoadError(str(msg[1]))
    log.info("engine process %d serves %s", msg[4], settings["path"])
    return proc, conn, events, msg[1:]


def exit_reason(proc: subprocess.Popen[bytes], rss: float | None) -> str:
    """How a dead engine process ended, in words; `rss`: its resident memory (MB) last seen."""
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if code < 0:
        name = signal.Signals(-code).name
        if -code == signal.SIGKILL:
            held = f"{rss:.0f} MB resident at the last check" if rss is not None else "its memory unknown"
            return f"was killed by {name} (as the out-of-memory killer does; {held})"
        return f"was killed by {name}"
    return f"exited with status {code}"


def stop_reading(conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
    """Stop reading `conn` (an events connection, read on `loop` by remote.py) and close it;
    from any thread (it is closed on the loop's thread, unless the loop has ended, so that no
    other thread closes it meanwhile)."""
    if conn.closed:
        return
    if loop.is_closed():
        conn.close()
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.remove_reader(conn.fileno())
        conn.close()
    else:
        with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing reads it any more
            loop.call_soon_threadsafe(stop_reading, conn, loop)
            return
        conn.close()
