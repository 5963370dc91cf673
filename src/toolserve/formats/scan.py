"""The words every reader of model text shares, the stream parser and the body readers alike:
the two kinds of text (CONTENT, REASONING), the statuses of a body's `advance` (MORE: wants more
text, DONE: the block is read, FAIL: not a block after all), and the scanning helpers that hold
back a marker still arriving."""

from __future__ import annotations

CONTENT, REASONING = "content", "reasoning"
MORE, DONE, FAIL = 0, 1, 2
_WS = " \t\r\n"


def may_grow_into(buf: str, i: int, marker: str) -> bool:
    """buf[i:] is a proper prefix of `marker`: the marker may still arrive.

    Looks at no more than the marker's length, so waiting at the end of a long buffer costs
    nothing (a `buf[i:]` there copies the whole rest of the text, on every marker)."""
    return len(buf) - i < len(marker) and marker.startswith(buf[i:])


def skip_ws(buf: str, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def may_grow_into_one(buf: str, i: int, markers: tuple[str, ...]) -> bool:
    """buf[i:] (maybe empty) may still grow into one of `markers` (only their length is read)."""
    return any(len(buf) - i <= len(m) and m.startswith(buf[i:]) for m in markers if m)


def hold_from(buf: str, start: int, marker: str) -> int:
    """First index >= start from which buf could still begin `marker`."""
    n = len(buf)
    for j in range(max(start, n - len(marker) + 1), n):
        if marker.startswith(buf[j:]):
            return j
    return n
