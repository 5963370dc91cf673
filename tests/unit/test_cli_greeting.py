"""`toolserve` alone greets: every command in a line, and the one to start with (exit 0)."""

from __future__ import annotations

import pytest

from toolserve.cli import build_parser, main


def test_no_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for command in ("serve", "chat", "run", "parse", "launch", "pull", "models", "rm"):
        assert any(line.split()[:1] == [command] for line in out.splitlines()), command
    assert "start here: toolserve serve" in out
    sub = build_parser()._subparsers
    assert sub is not None and all(a.help for a in sub._group_actions[0]._choices_actions)  # type: ignore[attr-defined]
