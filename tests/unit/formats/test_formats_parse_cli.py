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


# ---- detection report: `--format auto` from a template or a GGUF, and `--explain` ---------

JAMBA_OUT = '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>'


def _template(tmp_path: Path, text: str, name: str = "template.jinja") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("template", "fmt_id", "marker"), [
    ("{% for m in messages %}<|bom|><|{{ m.role }}|> {{ m.content }}<|eom|>{% endfor %}", "jamba", "<|bom|>"),
    ("<|startoftext|>{{ content }}<|extra_4|>{{ user }}<|extra_0|>", "hunyuan", "<|extra_0|>"),
    ("<|assistant_start|><|inner_prefix|>{{ t }}<|inner_suffix|><|tools_prefix|>", "apertus", "<|tools_prefix|>"),
    ("{{ 'function call' + '<|role_sep|>\\n' }}", "gigachat3", "<|role_sep|>"),
    ("You are developed by Salesforce xLAM team.<|eot_id|>", "xlam", "xLAM"),
    ("<|im_start|>system\n<tools></tools><tool_call>", "hermes", "<tool_call>"),
])
def test_auto_from_template_says_which_marker(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, template: str, fmt_id: str, marker: str) -> None:
    path = _template(tmp_path, template)
    rc, out, _ = run(monkeypatch, capsys, ["--template", path], "Hello.")
    assert rc == 0
    fmt = json.loads(out)["format"]
    assert fmt["id"] == fmt_id and fmt["chosen_by"] == "template" and fmt["template"] == path
    assert repr(marker) in fmt["why"]
    assert fmt["call_markers"] and all(isinstance(m, str) for m in fmt["call_markers"])


def test_auto_parses_with_the_detected_family(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    path = _template(tmp_path, "<|bom|><|user|> {{ m }}<|eom|>")
    rc, out, _ = run(monkeypatch, capsys, ["--format", "auto", "--template", path, "--split", "3"], JAMBA_OUT)
    data = json.loads(out)
    assert rc == 0 and data["format"]["id"] == "jamba"
    assert [(c["name"], c["arguments"]) for c in data["tool_calls"]] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("config", [
    {"chat_template": "<|bom|><|user|> {{ m }}<|eom|>"},
    {"chat_template": [{"name": "tool_use", "template": "<tool_call>"}, {"name": "default", "template": "<|bom|>"}]},
])
def test_auto_from_tokenizer_config(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path, config: dict) -> None:
    path = _template(tmp_path, json.dumps(config), "tokenizer_config.json")
    rc, out, _ = run(monkeypatch, capsys, ["--template", path], JAMBA_OUT)
    assert rc == 0 and json.loads(out)["format"]["id"] == "jamba"


def test_auto_from_the_bundled_gguf(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from toolserve.models.files import bundled_model

    gguf = str(bundled_model())  # SmolLM2: a plain ChatML template in the file, architecture llama
    rc, out, _ = run(monkeypatch, capsys, ["--gguf", gguf], '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')
    data = json.loads(out)
    assert rc == 0 and data["tool_calls"][0]["name"] == "get_time"
    fmt = data["format"]
    assert fmt["id"] == "hermes" and fmt["architecture"] == "llama" and gguf in fmt["template"]
    assert "'<|im_start|>'" in fmt["why"]


@pytest.mark.parametrize(("arch", "fmt_id", "rule"), [
    ("internlm2", "internlm2", "architecture"), ("apertus", "apertus", "architecture"),
    ("no-such-arch", "generic_json", "fallback"),
])
def test_auto_from_architecture(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                arch: str, fmt_id: str, rule: str) -> None:
    rc, out, _ = run(monkeypatch, capsys, ["--architecture", arch], "Hi")
    fmt = json.loads(out)["format"]
    assert rc == 0 and (fmt["id"], fmt["chosen_by"]) == (fmt_id, rule) and fmt["architecture"] == arch


def test_plain_chatml_with_the_internlm2_architecture(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _template(tmp_path, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}")
    _, out, _ = run(monkeypatch, capsys, ["--template", path], "Hi")
    assert json.loads(out)["format"]["id"] == "hermes"
    _, out, _ = run(monkeypatch, capsys, ["--template", path, "--architecture", "internlm2"], "Hi")
    fmt = json.loads(out)["format"]
    assert (fmt["id"], fmt["chosen_by"]) == ("internlm2", "template+architecture")


def test_explain_names_a_tool_that_was_not_offered(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    text = '<tool_calls>[{"name": "get_wether", "arguments": {}}]</tool_calls>'
    rc, out, _ = run(monkeypatch, capsys, ["--format", "jamba", "--tools", str(tools), "--explain"], text)
    data = json.loads(out)
    assert rc == 0 and data["tool_calls"] == [] and data["content"] == text
    assert data["format"] == {"id": "jamba", "chosen_by": "--format", "call_markers": ["<tool_calls>"],
                              "reasoning_markers": []}
    assert "'get_wether' is not an offered tool" in data["notes"]
    assert any(n.startswith("not a valid tool call, kept as text") for n in data["notes"])


def test_explain_points_at_the_family_the_model_writes(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    text = 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    rc, out, _ = run(monkeypatch, capsys, ["--format", "jamba", "--explain"], text)
    notes = json.loads(out)["notes"]
    assert rc == 0
    assert "the text holds none of jamba's call markers (<tool_calls>)" in notes
    hint = next(n for n in notes if n.startswith("the text holds '<tool_call>'"))
    assert "hermes" in hint.split(": read as ")[1] and "1 call(s)" in hint


def test_explain_is_quiet_when_the_call_was_read(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(monkeypatch, capsys, ["--format", "jamba", "--explain"], JAMBA_OUT)
    data = json.loads(out)
    assert rc == 0 and len(data["tool_calls"]) == 1 and data["notes"] == []


def test_without_explain_an_explicit_format_prints_no_report(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(monkeypatch, capsys, ["--format", "jamba"], JAMBA_OUT)
    assert set(json.loads(out)) == {"content", "reasoning", "tool_calls"}


@pytest.mark.parametrize("argv", [
    ["--template", "/nonexistent/template.jinja"],
    ["--gguf", "/nonexistent/model.gguf"],
    ["--template", "T", "--gguf", "G"],
    ["--format", "hermes", "--template", "T"],
    ["--format", "auto"],
])
def test_detection_usage_errors_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                       argv: list[str]) -> None:
    rc, out, err = run(monkeypatch, capsys, argv, "")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_not_a_gguf_and_a_json_without_template_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fake = _template(tmp_path, "not a model", "model.gguf")
    rc, _, err = run(monkeypatch, capsys, ["--gguf", fake], "")
    assert rc == 2 and "not a GGUF file" in err
    config = _template(tmp_path, json.dumps({"bos_token": "<s>"}), "tokenizer_config.json")
    rc, _, err = run(monkeypatch, capsys, ["--template", config], "")
    assert rc == 2 and "no chat_template" in err


def test_tools_read_a_fenced_call_as_the_server_does_under_auto(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    text = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    for split in ("1", "random:3"):
        rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes", "--tools", str(tools), "--split", split], text)
        data = json.loads(out)
        assert rc == 0 and data["content"] == ""
        assert [(c["name"], c["arguments"]) for c in data["tool_calls"]] == [("get_weather", {"city": "Paris"})]
    rc, out, _ = run(monkeypatch, capsys, ["--format", "hermes", "--tools", str(tools)], "Like this:\n" + text)
    assert json.loads(out)["tool_calls"] == []
