"""Turning token bytes into safe text: incremental UTF-8 decoding and stop-string matching."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class Utf8Stream:
    """Decodes a byte stream piece by piece without ever splitting a multi-byte character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Finds stop strings across piece boundaries.

    `feed` returns the text that is safe to emit: everything except a tail that could still
    grow into a stop string. Once a stop string is found, the text before it is returned and
    the matcher reports `stopped`; the stop string itself is never emitted.
    """

    def __init__(self, stops: Sequence[str]):
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> str:
        if not self._stops:
            return text
        buf = self._held + text
        first = self._first_hit(buf)
        if first is not None:
            # a longer stop string that starts earlier may still complete: wait for it
            earlier = next((j for j in range(first) if self._could_grow(buf[j:])), None)
            if earlier is None:
                self._held = ""
                self._stop_at(buf, first)
                return buf[:first]
            self._held = buf[earlier:]
            return buf[:earlier]
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """At the end of generation the held tail is plain text, up to a stop string in it."""
        out, self._held = self._held, ""
        first = self._first_hit(out)
        if first is not None:
            self._stop_at(out, first)
            return out[:first]
        return out

    def _stop_at(self, buf: str, at: int) -> None:
        self.stopped = True
        self.matched = max((s for s in self._stops if buf.startswith(s, at)), key=len)

    def _first_hit(self, buf: str) -> int | None:
        hits = [i for i in (buf.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None

    def _could_grow(self, tail: str) -> bool:
        return any(len(s) > len(tail) and s.startswith(tail) for s in self._stops)

    def _partial_tail(self, buf: str) -> int:
        longest = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(buf)), longest, -1):
                if buf.endswith(stop[:k]):
                    longest = k
                    break
        return longest
