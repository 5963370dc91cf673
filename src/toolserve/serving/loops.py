"""The loop guard, a rule of ours: an answer whose last `WINDOW` tokens are one span of at most
`MAX_PERIOD` tokens repeated back to back (so at least WINDOW / MAX_PERIOD times) has become a
loop, and ends there, as if at max_tokens.

Exact repetition of token ids only: a list of numbers, a table's rows or code's lines differ
somewhere in each span and never trip it; neither does a short run of identical lines, nor one
whose line is longer than `MAX_PERIOD` tokens. A loop that counts ("1. the sea 2. the sea ...")
is not seen either: DRY (engine/sampler.py) is what keeps those rare. O(MAX_PERIOD) per token:
for each period p, how many tokens in a row have equalled the one p back.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW = 256
MAX_PERIOD = 32


@dataclass(frozen=True)
class Loop:
    period: int  # tokens in the repeated span
    repeats: int  # times it repeats in the window

    def describe(self) -> str:
        return f"the last {WINDOW} tokens were a span of {self.period} tokens repeated {self.repeats} times"


class LoopGuard:
    def __init__(self, window: int = WINDOW, max_period: int = MAX_PERIOD):
        self._window = window
        self._tail: list[int] = []  # the last window + max_period tokens
        self._keep = window + max_period
        self._runs = [0] * (max_period + 1)  # _runs[p]: tokens in a row equal to the one p back
        self.loop: Loop | None = None

    def feed(self, token: int) -> Loop | None:
        """One more token of the answer; the loop, once the answer has become one."""
        tail = self._tail
        tail.append(token)
        n = len(tail)
        for p in range(1, len(self._runs)):
            if n > p and tail[-1 - p] == token:
                self._runs[p] += 1
                if self._runs[p] >= self._window - p and self.loop is None:  # the last `window` tokens are p-periodic
                    self.loop = Loop(p, self._window // p)
            else:
                self._runs[p] = 0
        if n > 2 * self._keep:
            del tail[: n - self._keep]
        return self.loop
