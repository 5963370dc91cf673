"""Parse time per MB of hostile model output, for every tool-call family (issue 31).

Each family gets inputs of about 100 KB and 1 MB, built from its own wire syntax (the
hand-written `SYNTAX` table of tests/unit/formats/formats_fixtures.py) by the builders the
hostile-input tests use (tests/unit/formats/test_parsers_hostile.py):

- markers:  the family's call markers repeated back to back (each opens a block that fails);
- unclosed: a call cut in the middle of its arguments, repeated (each block left open);
- random:   seeded random characters (letters, spaces, brackets, quotes, `<>`, newlines);
- deep:     one call whose argument value nests `[` ... `]` as deep as the size allows;
- long:     one call whose string argument fills the size;
- calls:    a block of many small valid calls.

Each is parsed whole (one `feed` + `finish`) and streamed in pieces of `--chunks` characters.
Printed per family and input: ms per MB at the large size and the ratio of the large size's
time to the small one's (the sizes differ 10x, so about 10 is linear and 100 quadratic).
A run that passes `--limit` seconds is stopped and shown as `>limit`.

    PYTHONPATH=src python bench/parse_speed.py [--family ID ...] [--kind K ...] [--chunks 0 16 4]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/ is a package

from tests.unit.formats.formats_fixtures import TOOLS
from tests.unit.formats.test_parsers_hostile import HOSTILE, random_text

from toolserve.formats.registry import FORMATS


class Slow(Exception):
    pass


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Slow

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def pieces_of(text: str, chunk: int) -> list[str]:
    return [text] if chunk == 0 else [text[i:i + chunk] for i in range(0, len(text), chunk)]


def parse_once(fmt_id: str, pieces: list[str]) -> float:
    parser = FORMATS[fmt_id].new_parser(TOOLS)
    t0 = time.perf_counter()
    for piece in pieces:
        parser.feed(piece)
    parser.finish()
    return time.perf_counter() - t0


def baseline_once(pieces: list[str]) -> float:
    """The bare loop over the pieces with a feed that only looks for one character."""
    t0 = time.perf_counter()
    for piece in pieces:
        piece.find("<")
    return time.perf_counter() - t0


def best_time(run: Callable[[], float], limit: float) -> float | str:
    """The best of up to 3 runs (fewer when one is slow), or why there is none."""
    best = float("inf")
    try:
        with time_limit(limit):
            for _ in range(3):
                best = min(best, run())
                if best > 0.5:
                    break
    except Slow:
        return f">{limit:.0f} s" if best == float("inf") else best
    except Exception as exc:  # a parser must never raise: shown in the table, not hidden
        return type(exc).__name__
    return best


def measure(fmt_id: str, kind: str, chunk: int, size: int, limit: float) -> tuple[float, float] | str:
    """(ms per MB at `size`, its time per character over that at size/10, times 10), or why not."""
    times = []
    for n in (size // 10, size):
        text = HOSTILE[kind](fmt_id, n)
        pieces = pieces_of(text, chunk)
        t = best_time(lambda: parse_once(fmt_id, pieces), limit)  # noqa: B023 (called right here)
        if isinstance(t, str):
            return t
        times.append(t / len(text))
    return times[1] * 1e9, times[1] / max(times[0], 1e-15) * 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="*", default=sorted(FORMATS))
    ap.add_argument("--kind", nargs="*", default=list(HOSTILE))
    ap.add_argument("--chunks", nargs="*", type=int, default=[0, 16], help="piece sizes; 0 = whole text")
    ap.add_argument("--size", type=int, default=1_000_000, help="the large size in characters")
    ap.add_argument("--limit", type=float, default=30.0, help="seconds before one run is stopped")
    args = ap.parse_args()

    modes = ["whole" if c == 0 else f"{c}-char" for c in args.chunks]
    text = random_text("", args.size)
    base = []
    for mode, chunk in zip(modes, args.chunks, strict=True):
        pieces = pieces_of(text, chunk)
        t = best_time(lambda: baseline_once(pieces), args.limit)  # noqa: B023 (called right here)
        base.append(f"{mode} {t * 1e9 / len(text) if isinstance(t, float) else 0:.0f} ms/MB")
    print("baseline, the bare loop over the pieces (same run): " + ", ".join(base) + "\n")
    print(f"{'family':18} {'input':9}" + "".join(f" {m + ' ms/MB':>14} {'ratio':>6}" for m in modes))
    results: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    failed: dict[tuple[str, str], list[str]] = {}
    for fmt_id in args.family:
        for kind in args.kind:
            cells = []
            for mode, chunk in zip(modes, args.chunks, strict=True):
                got = measure(fmt_id, kind, chunk, args.size, args.limit)
                if isinstance(got, str):
                    cells.append(f" {got:>14} {'':>6}")
                    failed.setdefault((kind, mode), []).append(f"{fmt_id} ({got})")
                else:
                    cells.append(f" {got[0]:14.0f} {got[1]:6.1f}")
                    results.setdefault((kind, mode), []).append((*got, fmt_id))
            print(f"{fmt_id:18} {kind:9}" + "".join(cells), flush=True)
    print("\nworst over the families: the slowest (ms/MB) and the least linear (ratio)")
    for (kind, mode), rows in results.items():
        slow, steep = max(rows), max(rows, key=lambda r: r[1])
        print(f"  {kind:9} {mode:8} {slow[0]:8.0f} ms/MB ({slow[2]}), ratio up to {steep[1]:.1f} ({steep[2]})")
    for (kind, mode), names in failed.items():
        print(f"  {kind:9} {mode:8} no time for {len(names)}: {', '.join(names)}")


if __name__ == "__main__":
    main()
