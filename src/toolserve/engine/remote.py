"""The engine in its own process: a native fault (a bad instruction, a driver error, the
out-of-memory killer) ends the engine process, never the server.

`RemoteEngine` is the Engine the serving pipeline sees. It starts the engine process
(engine/process.py: `python -m toolserve.engine.worker` on two socketpairs, loading the
LlamaCppEngine's settings) and keeps, in this process, only the model's vocabulary
(engine/vocab.py) to tokenize, detokenize and build grammars. Requests go out as token ids with
their sampling settings (a grammar as its text); the engine process sends back one message per
step with every token it sampled.

Two sockets join the processes. The control socket (loading, requests, image calls and their
replies, closing) is read by a supervisor thread, which also watches for hangs and restarts the
process. The events socket carries the per-step token events and is read on the event loop
itself (`loop.add_reader`), where the streams consume them: a token reaches its stream with one
wake-up of the server process, not a reader thread's and then the loop's (on a machine whose
cores all run llama.cpp's threads, every wake-up of the server stalls a decode step).

At most `slots` requests are in the engine process at a time; the rest wait here, so that a
crash loses only the requests that were running. When the process dies, or sends nothing for
`hang_timeout` seconds while requests run (it is then killed), those requests end at once with
EngineUnavailable (503) naming the signal or exit status, and the process is started again with
the same settings; the waiting requests go to the new one. Crashes in a row (no request
finished in between) wait 0.5, 1, 2, ... s before the restart; after `max_failures` the engine
is marked failed and every request gets the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from toolserve import errors
from toolserve.engine.base import EngineStats, Generation, MediaSpan, ModelInfo, TokenEvent
from toolserve.engine.process import exit_reason, reported_error, rss_mb, spawn, stop_reading
from toolserve.engine.prompt_cache import CacheStats
from toolserve.engine.slots import PREFILL_CHUNK
from toolserve.engine.vocab import Vocab
from toolserve.errors import EngineUnavailable, ModelLoadError
from toolserve.types import ImageData, SamplingParams

log = logging.getLogger(__name__)

HEARTBEAT = 1.0  # seconds between checks of a quiet engine process (hang, resident memory)


@dataclass
class _CacheView:
    """The engine process's prompt cache, as /health reports it."""

    budget: int
    stats: CacheStats


class _RemoteGen(Generation):
    def __init__(self, loop: asyncio.AbstractEventLoop, prompt_tokens: int, engine: RemoteEngine):
        super().__init__(loop, prompt_tokens)
        self._engine = engine
        self.rid = -1

    def cancel(self) -> None:
        if not self.cancelled:
            super().cancel()
            self._engine._cancel(self)


class RemoteEngine:
    """A LlamaCppEngine (its keyword arguments: `settings`) in an engine process of its own."""

    prefill_chunk = PREFILL_CHUNK

    def __init__(self, settings: dict[str, Any], *, hang_timeout: float = 120.0, max_failures: int = 5):
        self._settings = dict(settings)
        self._hang = hang_timeout
        self._max_failures = max_failures
        self._lock = threading.Lock()  # the state below is shared by the event loop and the reader
        self._send_lock = threading.Lock()
        self._gens: dict[int, _RemoteGen] = {}  # in the engine process now
        self._queue: deque[tuple[_RemoteGen, list[int], SamplingParams, list[MediaSpan], int]] = deque()
        self._calls: dict[int, list[Any]] = {}
        self._ids = itertools.count()
        self._ready = False
        self._closing = False
        self._dispatching = False  # a dispatch is queued on the event loop (`submit`)
        self._failures = 0  # crashes since a request last finished
        self._rss: float | None = None
        self.failed: str | None = None  # why the engine gave up (then every request gets it)
        self.embedder: Any = None  # --embeddings: engine/embed.py's context, in this (the server's) process
        self.restarts = 0
        self.last_crash: str | None = None
        self.stats = EngineStats()
        self._base = [0] * len(EngineStats.TOTALS)  # counters of the engine processes before the current one
        self._last = [0] * len(EngineStats.TOTALS)
        self._loop: asyncio.AbstractEventLoop | None = None  # the event loop that reads the events socket
        self._reading: Connection | None = None  # the last events connection given to a loop (which closes it)
        self._steps = 0  # events messages read (the supervisor tells a busy engine from a hung one)
        self._econn: Connection | None  # the current process's events (None once it is gone)
        self._proc, self._conn, self._econn, ready = spawn(self._settings, self._rss)
        self.info: ModelInfo = ready[0]
        self.slots: int = ready[1]
        self.cache = _CacheView(ready[2], CacheStats()) if ready[2] is not None else None
        self.pid: int = ready[3]
        self._ready = True
        try:
            self._vocab = Vocab(self._settings["path"])
        except ModelLoadError:
            self._stop_process()
            raise
        self._reader = threading.Thread(target=self._read, name="toolserve-engine-supervisor", daemon=True)
        self._reader.start()

    # -- the process ---------------------------------------------------------------------------
    def _send(self, msg: tuple[Any, ...]) -> None:
        with self._send_lock:
            self._conn.send(msg)

    def _read(self) -> None:
        """The supervisor thread: control messages in, hangs and crashes noticed, the process restarted."""
        while True:
            reason = self._pump()
            if reason is None or self._closing:
                return
            self._crashed(reason)
            if not self._restart():
                return

    def _pump(self) -> str | None:
        """Read the current process's control messages until it is closed (None) or gone (why)."""
        conn, proc = self._conn, self._proc
        last = time.monotonic()
        steps = self._steps
        while True:
            try:
                ready = conn.poll(HEARTBEAT)
                msg = conn.recv() if ready else None
            except (EOFError, OSError):
                return None if self._closing else exit_reason(proc, self._rss)
            now = time.monotonic()
            if msg is None:
                self._rss = rss_mb(proc.pid) or self._rss
                with self._lock:
                    busy = bool(self._gens) or bool(self._calls)
                if not busy or self._steps != steps:  # idle, or it sent events since the last check
                    last, steps = now, self._steps
                elif now - last > self._hang:
                    with contextlib.suppress(OSError):
                        proc.send_signal(signal.SIGUSR1)  # its threads' stacks go to the log first
                        time.sleep(0.5)
                    proc.kill()
                    proc.wait()
                    return f"hung (no engine step for {self._hang:g} s while requests ran) and was killed"
                continue
            last = now
            if msg[0] == "reply":
                with self._lock:
                    slot = self._calls.pop(msg[1], None)
                if slot is not None:
                    slot[1] = (msg[2], msg[3])
                    slot[0].set()
            elif msg[0] == "closed":
                return None

    # -- the events socket, read on the event loop -------------------------------------------
    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the current process's events on `loop` (the caller runs on it)."""
        with self._lock:
            conn = self._econn
            if conn is None or (conn is self._reading and loop is self._loop):
                return
            old, old_loop = self._reading, self._loop
            self._reading, self._loop = conn, loop
        if old is not None and old_loop is not None:  # another loop read it (a loop that has ended)
            stop_reading(old, old_loop)
        loop.add_reader(conn.fileno(), self._readable, conn, loop)

    def _readable(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        """One events message (the loop calls again while more are waiting)."""
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the process ended; the supervisor reports why
            stop_reading(conn, loop)
            return
        self._steps += 1
        self._events(msg[1], msg[2])

    def _events(self, items: list[tuple[Any, ...]], stats: tuple[Any, ...]) -> None:
        ended = False
        for item in items:
            if item[0] == "tok":
                gen = self._gens.get(item[1])
                if gen is not None:
                    gen.deliver(TokenEvent(item[2], item[3], item[4], item[5]))
                continue
            if item[0] == "cached":  # set before the first token is handed over
                gen = self._gens.get(item[1])
                if gen is not None:
                    gen.cached_tokens = item[2]
                continue
            _, rid, finish, err, cached = item
            with self._lock:
                gen = self._gens.pop(rid, None)
            if gen is None:
                continue
            ended = True
            gen.cached_tokens = cached
            gen.finish(finish, reported_error(err))
            self.stats.finished += 1
            if err is None:
                self._failures = 0  # it serves again
        *totals, active, cache = stats
        self._last = totals
        s = self.stats
        for name, before, now in zip(s.TOTALS, self._base, totals, strict=True):
            setattr(s, name, before + now)
        s.active = active
        if self.cache is not None and cache is not None:
            self.cache.stats = CacheStats(*cache)
        if ended:
            self._dispatch()

    def _crashed(self, reason: str) -> None:
        with self._lock:
            self._ready = False
            lost = list(self._gens.values())
            self._gens.clear()
            calls = list(self._calls.values())
            self._calls.clear()
            econn, self._econn = self._econn, None
            unread = econn is not None and econn is not self._reading  # else its loop closes it
        self._failures += 1
        self.last_crash = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: the engine process {reason}"
        log.error(
            "the engine process of %s %s; %d running request(s) ended, %d waiting",
            self._settings["path"], reason, len(lost), len(self._queue),
        )
        message = f"The model's engine process {reason}. This request was lost with it; the engine restarts, so a retry will be served."
        for gen in lost:
            gen.close(None, EngineUnavailable(message))
            self.stats.finished += 1
        for slot in calls:
            slot[1] = (False, ("EngineUnavailable", message))
            slot[0].set()
        self._base = [before + last for before, last in zip(self._base, self._last, strict=True)]
        self._last = [0] * len(EngineStats.TOTALS)
        self.stats.active = 0
        self._conn.close()
        if unread:
            assert econn is not None
            econn.close()

    def _restart(self) -> bool:
        """Start the process again (after a pause when crashes come in a row); False once it
        failed `max_failures` times in a row, or when the engine is being closed."""
        while not self._closing:
            if self._failures >= self._max_failures:
                self._give_up(f"its engine process failed {self._failures} times in a row; the last time it {self.last_crash}")
                return False
            if self._failures > 1:
                time.sleep(min(30.0, 0.5 * 2 ** (self._failures - 2)))
            try:
                proc, conn, econn, ready = spawn(self._settings, self._rss)
            except ModelLoadError as exc:
                self._failures += 1
                self.last_crash = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: restarting failed: {exc.message}"
                log.error("restarting the engine process failed: %s", exc.message)
                continue
            if self._closing:
                conn.close()
                econn.close()
                proc.kill()
                return False
            with self._lock:
                self._proc, self._conn, self._econn, self.pid = proc, conn, econn, ready[3]
                self._ready = True
                loop = self._loop
            if loop is not None:  # the loop that read the last process's events reads this one's
                with contextlib.suppress(RuntimeError):  # it has ended: the next request's loop will
                    loop.call_soon_threadsafe(self._attach, loop)
            self.restarts += 1
            log.warning("engine process restarted (%d restarts so far): pid %d", self.restarts, self.pid)
            self._dispatch()
            return True
        return False

    def _give_up(self, why: str) -> None:
        self.failed = f"The model is unavailable: {why}"
        log.error("%s: %s", self._settings["path"], self.failed)
        with self._lock:
            waiting = list(self._queue)
            self._queue.clear()
        for gen, *_ in waiting:
            gen.close(None, EngineUnavailable(self.failed))
            self.stats.finished += 1

    def _stop_process(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    # -- what the pipeline calls ------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return self._vocab.tokenize(text, add_bos=add_bos, special=special)

    def token_piece(self, token: int) -> bytes:
        return self._vocab.token_piece(token)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return self._vocab.detokenize(tokens)

    def grammar_tokenizer(self) -> object:
        return self._vocab.grammar_tokenizer()

    def tokenize_image(self, image: ImageData) -> list[int | MediaSpan]:
        """The image's tokens; its encoded input stays in the engine process (the MediaSpan's
        handle names it there)."""
        if not self.info.vision:
            raise errors.InvalidRequest("This model accepts text only.")
        if self.failed:
            raise EngineUnavailable(self.failed)
        slot: list[Any] = [threading.Event(), None]
        with self._lock:
            cid = next(self._ids)
            self._calls[cid] = slot
        with contextlib.suppress(OSError):  # the reader notices a death and answers the call
            self._send(("call", cid, "tokenize_image", (image,)))
        slot[0].wait()
        ok, value = slot[1]
        if not ok:
            raise reported_error(value)  # type: ignore[misc]
        return value  # type: ignore[no-any-return]

    def submit(self, prompt: Sequence[int], params: SamplingParams, media: Sequence[MediaSpan] = (), adapter: int = 0) -> Generation:
        loop = asyncio.get_running_loop()
        if self._reading is not self._econn or self._loop is not loop:
            self._attach(loop)
        gen = _RemoteGen(loop, len(prompt), self)
        self.stats.submitted += 1
        if self.failed:
            gen.close(None, EngineUnavailable(self.failed))
            self.stats.finished += 1
            return gen
        with self._lock:
            gen.rid = next(self._ids)
            self._queue.append((gen, list(prompt), params, list(media), adapter))
        if not self._dispatching:  # after the requests the event loop has ready to run now
            self._dispatching = True
            asyncio.get_running_loop().call_soon(self._dispatch_soon)
        return gen

    def _dispatch_soon(self) -> None:
        self._dispatching = False
        self._dispatch()

    def _dispatch(self) -> None:
        """Send waiting requests while the engine process has room, in one message: requests
        that arrive together start reading their prompts in the same engine step."""
        with self._lock:
            batch = []
            while self._ready and self._queue and len(self._gens) < self.slots:
                gen, prompt, params, media, adapter = self._queue.popleft()
                self._gens[gen.rid] = gen
                batch.append((gen.rid, prompt, params, media, adapter))
        if batch:
            with contextlib.suppress(OSError):  # the reader notices the death and ends them
                self._send(("submit", batch))

    def _cancel(self, gen: _RemoteGen) -> None:
        with self._lock:
            running = gen.rid in self._gens
            waiting = [q for q in self._queue if q[0] is gen]
            for q in waiting:
                self._queue.remove(q)
        if waiting:
            gen.close("stop")
            self.stats.finished += 1
        elif running:
            with contextlib.suppress(OSError):
                self._send(("cancel", gen.rid))

    def fault(self, kind: str) -> None:
        """Test-only (the server's TOOLSERVE_TEST_FAULTS): make the engine process fault after its next step."""
        try:
            self._send(("fault", kind))
        except OSError:
            raise EngineUnavailable("The engine process is restarting.") from None

    def health(self) -> dict[str, Any]:
        return {
            "process": "separate",
            "pid": self.pid,
            "restarts": self.restarts,
            "last_crash": self.last_crash,
            "failed": self.failed,
        }

    def close(self) -> None:
        self._closing = True
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        with self._lock:
            waiting = list(self._queue)
            self._queue.clear()
        for gen, *_ in waiting:
            gen.close("stop")
        with contextlib.suppress(OSError):
            self._send(("close",))
        self._reader.join(timeout=60)
        if self._proc.poll() is None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._stop_process()
        self._conn.close()
        with self._lock:
            econn, reading, loop = self._econn, self._reading, self._loop
            self._econn = self._reading = None
        if reading is not None and loop is not None:
            stop_reading(reading, loop)
        if econn is not None and econn is not reading:
            econn.close()
        self._vocab.close()
