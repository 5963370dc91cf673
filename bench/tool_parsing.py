"""Conformance corpus pass rate per tool-call family, whole and streamed.

Runs every row of the corpora in tests/unit/formats/corpus_<family>.py through the same check
as tests/unit/formats/test_corpus.py (parser contract, content, reasoning, calls and ids):

- whole: the text in one piece;
- split: the text cut in two at every point, and one character at a time;
- random: 25 random cuttings per row (seeded, so runs repeat).

A row passes a mode when every one of its cuttings rebuilds the expected message. Columns:
rows; peer (rows whose variant comes from another project: a parser suite, parser, template or
model card; the rest are toolserve's own rows and design notes); non-call (rows expected to give
no call: prose, malformed or ambiguous text); sources (distinct peer sources cited); then the
pass rate of each mode. Families without a corpus are listed at the end.

    PYTHONPATH=src python bench/tool_parsing.py [--family ID ...] [--failures]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/ is a package

from tests.unit.formats.corpus_rows import Row
from tests.unit.formats.test_corpus import ROWS, check

from toolserve.formats.registry import FORMATS

OWN = "toolserve's own row"


def from_peer(row: Row) -> bool:
    """The row's variant comes from another project (a suite, parser, template or model card),
    not from toolserve itself (its own rows and its design notes)."""
    return row.source != OWN and not row.source.startswith("shared/design/")


def cuttings(text: str, mode: str, rng: random.Random) -> list[list[str]]:
    if mode == "whole":
        return [[text]]
    if mode == "split":
        return [[text[:k], text[k:]] for k in range(1, len(text))] + [list(text)]
    out = []
    for _ in range(25):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 40)))) if len(text) > 1 else []
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=False)])
    return out


def passes(fmt: str, row: Row, mode: str, rng: random.Random) -> str | None:
    """None when every cutting rebuilds the expected message, else what went wrong."""
    for pieces in cuttings(row.text, mode, rng):
        try:
            check(fmt, row, pieces)
        except AssertionError as exc:
            return f"{len(pieces)} piece(s): {str(exc).splitlines()[0][:160]}"
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", help="only these format ids")
    ap.add_argument("--failures", action="store_true", help="list every failing row and mode")
    args = ap.parse_args(argv)
    rng = random.Random(16)
    by_fmt: dict[str, list[Row]] = defaultdict(list)
    for fmt, row in ROWS:
        if not args.family or fmt in args.family:
            by_fmt[fmt].append(row)
    modes = ("whole", "split", "random")
    print(f"{'format id':<18}{'rows':>6}{'peer':>6}{'non-call':>10}{'sources':>9}" + "".join(f"{m:>9}" for m in modes))
    totals = dict.fromkeys(("rows", "peer", "noncall", *modes), 0)
    failures: list[str] = []
    for fmt in sorted(by_fmt):
        rows = by_fmt[fmt]
        ok = dict.fromkeys(modes, 0)
        for row in rows:
            for mode in modes:
                why = passes(fmt, row, mode, rng)
                if why is None:
                    ok[mode] += 1
                else:
                    failures.append(f"{fmt} {row.name} [{mode}] {why}")
        peer = sum(1 for r in rows if from_peer(r))
        noncall = sum(1 for r in rows if not r.calls)
        suites = len({r.source for r in rows if from_peer(r)})
        rates = "".join(f"{100 * ok[m] / len(rows):>8.1f}%" for m in modes)
        print(f"{fmt:<18}{len(rows):>6}{peer:>6}{noncall:>10}{suites:>9}{rates}")
        totals["rows"] += len(rows)
        totals["peer"] += peer
        totals["noncall"] += noncall
        for m in modes:
            totals[m] += ok[m]
    n = totals["rows"] or 1
    rates = "".join(f"{100 * totals[m] / n:>8.1f}%" for m in modes)
    print(f"{'all':<18}{totals['rows']:>6}{totals['peer']:>6}{totals['noncall']:>10}{'':>9}{rates}")
    missing = sorted(set(FORMATS) - set(by_fmt)) if not args.family else []
    if missing:
        print(f"no corpus yet ({len(missing)}): {', '.join(missing)}")
    if args.failures:
        print("\n".join(failures) or "no failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
