"""The engine process: one loaded model's llama.cpp context and scheduler, behind a socket.

`python -m toolserve.engine.worker FD EVENTS_FD` is started by `engine/remote.py` with one end
of two socketpairs: FD carries control messages both ways, EVENTS_FD the "events" messages out
(the server reads them on its event loop). Messages are pickled tuples (multiprocessing's
Connection framing):

  in:  ("load", kwargs)                      LlamaCppEngine(**kwargs); answers ("ready", info, slots) or ("failed", message)
       ("submit", [(rid, prompt, params, media, adapter), ...])   the requests sent together,
                                             queued at once so that they start in one engine step
       ("cancel", rid)
       ("call", cid, method, args)           tokenize_image; answers ("reply", cid, ok, value)
       ("fault", kind)                       test-only, after the next step (sent only when TOOLSERVE_TEST_FAULTS=1)
       ("close",)
  out: ("events", [event, ...], stats)       once per engine step: ("cached", rid, cached_tokens) before a
                                             request's first token, ("tok", rid, token, piece, is_eog, logprob)
                                             and ("end", rid, finish, error, cached_tokens)

The sampler chains and grammar masks run here, next to the logits: a request's grammar arrives
as its text (constrain.matcher.GrammarFactory) and is compiled against this process's
vocabulary. When the server goes away (its end of the socket closes, also when it is killed)
the main thread reads EOF and the process exits at once. faulthandler writes the Python stacks
of a native fault to stderr, which is the server's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from multiprocessing.connection import Connection
from typing import Any

from toolserve.engine.base import MediaSpan, TokenEvent
from toolserve.errors import ToolserveError, log_failure

log = logging.getLogger("toolserve.engine.worker")

MAX_HANDLES = 256  # encoded images kept for requests that have not been submitted yet


class _Gen:
    """The engine side of a Generation whose reader is in the server process."""

    def __init__(self, rid: int, out: _Outbox, gens: dict[int, _Gen]):
        self.rid = rid
        self.out = out
        self.gens = gens
        self.cancelled = False
        self.cached_tokens = 0
        self._told = False

    def push(self, event: TokenEvent) -> None:
        if not self._told:  # the reuse is known once the prompt is read; the server's reader may
            self._told = True  # end the answer at any token (a stop string), before the "end" event
            self.out.add(("cached", self.rid, self.cached_tokens))
        self.out.add(("tok", self.rid, event.token_id, event.piece, event.is_eog, event.logprob))

    def close(self, finish_reason: str | None = None, error: BaseException | None = None) -> None:
        err = None
        if error is not None:
            err = (type(error).__name__, error.message if isinstance(error, ToolserveError) else f"engine error: {type(error).__name__}")
        self.gens.pop(self.rid, None)
        self.out.add(("end", self.rid, finish_reason, err, self.cached_tokens))


class _Outbox:
    """Events of one engine step, sent together."""

    def __init__(self, conn: Connection, events: Connection, stats: Any):
        self._conn = conn
        self._events = events
        self._stats = stats
        self._items: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.fault: str | None = None  # test-only: fault after the next step
        self._sent = time.monotonic()

    def add(self, item: tuple[Any, ...]) -> None:
        with self._lock:
            self._items.append(item)

    def flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        # also a heartbeat every half second of steps without tokens (a long prompt being read),
        # so that the server tells a busy engine from a hung one
        if items or time.monotonic() - self._sent >= 0.5:
            with self.send_lock:  # the engine thread after a step, the main thread after a submit
                self._events.send(("events", items, self._stats()))
                self._sent = time.monotonic()
        if self.fault is not None:
            fault(self.fault)

    def send(self, msg: tuple[Any, ...]) -> None:
        """A control message (from the main thread or the engine thread)."""
        with self.send_lock:
            self._conn.send(msg)


def fault(kind: str) -> None:
    """Test-only faults, as a broken driver, model file or out-of-memory killer would cause."""
    log.warning("test fault: %s", kind)
    if kind == "segv":
        ctypes.string_at(0)  # a real SIGSEGV: reads address 0
    elif kind == "abort":
        os.abort()
    elif kind == "exit":
        os._exit(3)
    elif kind == "hang":
        threading.Event().wait()  # the engine thread never comes back
    elif kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def _stats(engine: Any) -> tuple[Any, ...]:
    s = engine.stats
    cache = dataclasses.astuple(engine.cache.stats) if engine.cache is not None else None
    return (*(getattr(s, name) for name in s.TOTALS), s.active, cache)


def serve(conn: Connection, events: Connection) -> None:
    kind, kwargs = conn.recv()
    assert kind == "load"
    from toolserve.constrain.matcher import Constrainer
    from toolserve.engine.llama_cpp import LlamaCppEngine

    try:
        engine = LlamaCppEngine(**kwargs)
    except ToolserveError as exc:
        conn.send(("failed", exc.message))
        return
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    constrainer = Constrainer(engine.grammar_tokenizer, engine.token_piece, engine.info.n_vocab)
    out = _Outbox(conn, events, lambda: _stats(engine))
    engine.on_step = out.flush
    gens: dict[int, _Gen] = {}
    handles: OrderedDict[int, Any] = OrderedDict()  # id -> libmtmd chunk of an encoded image
    cache_budget = engine.cache.budget if engine.cache is not None else None
    out.send(("ready", engine.info, engine.slots, cache_budget, os.getpid()))
    next_handle = 0
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the server is gone: nothing here is worth finishing
        what = msg[0]
        if what == "submit":  # the requests the server sent together: prepared first, queued at once
            ready = []
            for rid, prompt, params, media, adapter in msg[1]:
                gen = gens[rid] = _Gen(rid, out, gens)
                try:
                    if params.constraint is not None:
                        params.constraint.bind(constrainer)
                    media = [dataclasses.replace(m, handle=handles.pop(m.handle)) for m in media]
                except KeyError:
                    gen.close(None, ToolserveError("an image of this request was encoded by an engine process that has since restarted; send the request again"))
                    continue
                except ToolserveError as exc:
                    gen.close(None, exc)
                    continue
                ready.append((gen, prompt, params, media, adapter))
            out.flush()
            for job in ready:
                engine.enqueue(*job)
        elif what == "cancel":
            running = gens.get(msg[1])
            if running is not None:
                running.cancelled = True
        elif what == "call":
            _, cid, method, args = msg
            try:
                if method != "tokenize_image":
                    raise ValueError(f"unknown call {method}")
                value = []
                for item in engine.tokenize_image(*args):
                    if isinstance(item, MediaSpan):
                        handles[next_handle] = item.handle
                        while len(handles) > MAX_HANDLES:
                            handles.popitem(last=False)
                        item = dataclasses.replace(item, handle=next_handle)
                        next_handle += 1
                    value.append(item)
                out.send(("reply", cid, True, value))
            except ToolserveError as exc:
                out.send(("reply", cid, False, (type(exc).__name__, exc.message)))
            except Exception as exc:
                log_failure(log, f"engine call {method} failed", exc)
                out.send(("reply", cid, False, ("EngineFailure", f"engine call {method} failed: {type(exc).__name__}")))
        elif what == "fault":
            out.fault = msg[1]  # fires after the next engine step
        elif what == "close":
            engine.close()
            out.flush()
            out.send(("closed",))
            return


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a native fault prints every thread's Python stack to stderr (the server's)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # so does the server, before it kills a hung process
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which closes this process
    logging.basicConfig(level=os.environ.get("TOOLSERVE_ENGINE_LOG", "WARNING"), format="%(asctime)s %(levelname)s %(name)s[engine %(process)d]: %(message)s")
    conn, events = Connection(int(argv[0])), Connection(int(argv[1]))
    started = time.monotonic()
    try:
        serve(conn, events)
    finally:
        log.debug("engine process done after %.1f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
