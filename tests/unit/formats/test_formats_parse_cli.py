"""`toolserve parse`: output JSON, exit codes, --split."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from toolserve.formats.parse_cli import main

OUTPUT = ('<think>Need weather.</think>Checking.\n<tool_call>\n{"name": "get_weather", "arguments": '
          '{"city": "Paris", "n": [1, 2.5]}}\n</tool_call>')
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
        stdin: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_parse_whole(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes"], OUTPUT)
    assert rc == 0
    data = json.loads(out)
    assert data["content"] == "Checking." and data["reasoning"] == "Need weather."
    assert [(c["name"], c["arguments"]) for c in data["tool_calls"]] == [("get_weather", {"city": "Paris", "n": [1, 2.5]})]
    assert data["tool_calls"][0]["id"].startswith("call_")


@pytest.mark.parametrize("split", ["1", "3", "random:0", "random:42"])
def test_splits_agree(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], split: str) -> None:
    _, whole, _ = run(monkeypatch, capsys, ["--format", "hermes"], OUTPUT)
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes", "--split", split], OUTPUT)
    assert rc == 0

    def norm(text: str) -> dict:
        data = json.loads(text)
        for c in data["tool_calls"]:
            c.pop("id")
        return data

    assert norm(out) == norm(whole)


def test_tools_file_filters_names(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                  tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    text = '<tool_call>{"name": "other", "arguments": {}}</tool_call>'
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes", "--tools", str(tools)], text)
    assert rc == 0 and json.loads(out) == {"content": text, "reasoning": "", "tool_calls": []}
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes"], text)  # no --tools: any name
    assert [c["name"] for c in json.loads(out)["tool_calls"]] == ["other"]


def test_thinking_open(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(monkeypatch, capsys, ["--format", "qwen3_coder", "--thinking-open"], "hmm</think>Hi")
    assert rc == 0 and json.loads(out) == {"content": "Hi", "reasoning": "hmm", "tool_calls": []}


@pytest.mark.parametrize("garbage", ["", "<tool_call>", "<tool_call>{\"name\": ", "\x00\ufffd{[(", "</think>" * 3])
def test_any_output_exits_zero(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], garbage: str) -> None:
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes", "--split", "random:1"], garbage)
    assert rc == 0 and set(json.loads(out)) == {"content", "reasoning", "tool_calls"}


@pytest.mark.parametrize("argv", [
    ["--format", "nope"], [], ["--format", "hermes", "--tools", "/nonexistent/tools.json"],
    ["--format", "hermes", "--split", "x"], ["--format", "hermes", "--split", "random:x"],
])
def test_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    rc, out, err = run(monkeypatch, capsys, argv, "")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1


def test_bad_tools_json_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                tmp_path: Path) -> None:
    bad = tmp_path / "tools.json"
    bad.write_text("{not json")
    rc, _, err = run(monkeypatch, capsys, ["--format", "hermes", "--tools", str(bad)], "")
    assert rc == 2 and "cannot read tools file" in err
