"""`toolserve launch`: the context and prompt an agent gets (fit), the configuration written
for each agent and where (launch's folder, or merged into the user's with a backup), the
arguments left to the user, a missing agent, and a server already running at --url."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomllib

from tests.stub_http import StubHttp
from toolserve.errors import ToolserveError
from toolserve.launch import files
from toolserve.launch.agents import CLAUDE, CODEX, LEAN_PROMPT, Setup, claude_args
from toolserve.launch.command import configure, main, split_args
from toolserve.launch.fit import DoesNotFit, fit

MODEL = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HOME with the user's own agent files in it, which launch must leave alone."""
    for var in ("TOOLSERVE_CACHE_DIR", "XDG_CACHE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "TOOLSERVE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "config.toml").write_text('# mine\nmodel = "gpt-5"\n\n[features]\nfoo = true  # keep\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n')
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"theme": "dark", "env": {"MY_VAR": "1"}}))
    return tmp_path


def user_files(home: Path) -> dict[str, str]:
    return {p: (home / p).read_text() for p in (".codex/config.toml", ".claude/settings.json")}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# -- fit --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("agent", "kw", "ctx", "lean", "note"),
    [
        (CODEX, {"trained": 8192}, 8192, True, "too few for Codex CLI's own prompt and tools"),
        (CLAUDE, {"trained": 8192}, 8192, True, "a short prompt and the Bash, Read, Edit and Write tools"),
        (CODEX, {"trained": 131072}, 32768, False, None),
        (CLAUDE, {"trained": 131072}, 65536, False, None),
        (CLAUDE, {"trained": 32768}, 32768, True, "a context of 40,960 or more"),
        (CODEX, {"trained": 8192, "ctx_flag": 16384}, 16384, False, "past the 8,192 tokens the model was trained on"),
        (CODEX, {"trained": 131072, "prompt": "lean"}, 32768, True, None),
        (CODEX, {"served": 8192, "url": "http://h:1"}, 8192, True, "the server at http://h:1 gives"),
        (CODEX, {"trained": None}, 32768, False, None),
    ],
)
def test_fit_picks_context_and_prompt(agent: Any, kw: dict[str, Any], ctx: int, lean: bool, note: str | None) -> None:
    got = fit(agent, MODEL, **kw)
    assert (got.ctx_size, got.lean) == (ctx, lean)
    assert (got.note is None) if note is None else (note in (got.note or ""))


@pytest.mark.parametrize(
    ("agent", "kw", "says"),
    [
        (CODEX, {"trained": 8192, "prompt": "full"}, ["trained on a context of 8,192", "about 8,978", "Pass --prompt lean", "--model with a longer context"]),
        (CLAUDE, {"trained": 2048}, ["needs 7,168 even with a short prompt", "Pass --model with a longer context"]),
        (CODEX, {"served": 2048, "url": "http://h:1"}, ["gives SmolLM2-135M-Instruct.Q4_1 a context of 2,048", "Restart it with --ctx-size 6144"]),
        (CLAUDE, {"served": 16384, "url": "http://h:1", "prompt": "full"}, ["restart it with --ctx-size 40960"]),
    ],
)
def test_fit_says_what_to_pass_when_the_context_is_too_small(agent: Any, kw: dict[str, Any], says: list[str]) -> None:
    with pytest.raises(DoesNotFit) as exc:
        fit(agent, MODEL, **kw)
    for part in says:
        assert part in exc.value.message


# -- configuration ----------------------------------------------------------------------------------

SETUP = Setup("http://127.0.0.1:8123", MODEL, 8192, lean=True)
OWN = ".cache/toolserve/launch"


@pytest.mark.parametrize(
    ("agent", "setup", "written", "env"),
    [
        (CODEX, SETUP, {f"{OWN}/codex/config.toml"}, {"CODEX_HOME"}),
        (CODEX, Setup(SETUP.url, MODEL, 32768, lean=False, api_key="k"), {f"{OWN}/codex/config.toml"}, {"CODEX_HOME", "TOOLSERVE_API_KEY"}),
        (CLAUDE, SETUP, {f"{OWN}/claude/settings.json", f"{OWN}/claude/.claude.json"}, {"CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"}),
    ],
)
def test_configure_writes_only_its_own_folder(home: Path, agent: Any, setup: Setup, written: set[str], env: set[str]) -> None:
    before, files_before = user_files(home), tree(home)
    got = configure(agent, setup, [], write_user=False)
    assert user_files(home) == before
    assert tree(home) - files_before == written
    assert env <= set(got.env)
    assert got.written == []  # nothing of the user's changed, nothing to say


def test_codex_config_names_the_server_and_the_lean_settings(home: Path) -> None:
    got = configure(CODEX, Setup(SETUP.url, MODEL, 8192, lean=True, api_key="k"), [], write_user=False)
    cfg = tomllib.loads((Path(got.env["CODEX_HOME"]) / "config.toml").read_text())
    assert cfg["model"] == MODEL and cfg["model_provider"] == "toolserve" and cfg["model_context_window"] == 8192
    assert cfg["model_providers"]["toolserve"] == {
        "name": "toolserve", "base_url": "http://127.0.0.1:8123/v1", "wire_api": "responses",
        "stream_idle_timeout_ms": 1_800_000, "env_key": "TOOLSERVE_API_KEY",
    }
    assert got.env["TOOLSERVE_API_KEY"] == "k"
    assert cfg["instructions"] == LEAN_PROMPT and cfg["features"]["shell_tool"] is True and cfg["agents"] == {"enabled": False}
    # a full launch after it rewrites the file: no lean key stays, the folders Codex was told to trust do
    path = Path(got.env["CODEX_HOME"]) / "config.toml"
    path.write_text(path.read_text() + '\n[projects."/work/x"]\ntrust_level = "trusted"\n')
    configure(CODEX, Setup(SETUP.url, MODEL, 32768, lean=False), [], write_user=False)
    cfg = tomllib.loads(path.read_text())
    assert "instructions" not in cfg and "agents" not in cfg and cfg["model_context_window"] == 32768
    assert cfg["projects"] == {"/work/x": {"trust_level": "trusted"}}


def test_claude_config_env_and_first_run_state(home: Path) -> None:
    got = configure(CLAUDE, SETUP, [], write_user=False)
    own = Path(got.env["CLAUDE_CONFIG_DIR"])
    settings = json.loads((own / "settings.json").read_text())
    assert settings["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8123"
    assert {settings["env"][k] for k in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")} == {MODEL}
    assert settings["env"]["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "8192"
    assert got.env["ANTHROPIC_API_KEY"] == "" and got.env["ANTHROPIC_AUTH_TOKEN"] == "toolserve"
    assert json.loads((own / ".claude.json").read_text()) == {"hasCompletedOnboarding": True}
    # Claude Code's own state in that file is kept on the next launch
    (own / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "projects": {"/w": {}}}))
    configure(CLAUDE, SETUP, [], write_user=False)
    assert json.loads((own / ".claude.json").read_text())["projects"] == {"/w": {}}


def test_write_config_merges_into_the_users_files_and_keeps_a_backup(home: Path) -> None:
    before = user_files(home)
    got = configure(CODEX, SETUP, [], write_user=True)
    text = (home / ".codex/config.toml").read_text()
    cfg = tomllib.loads(text)
    assert cfg["model"] == MODEL and cfg["model_providers"]["toolserve"]["base_url"] == "http://127.0.0.1:8123/v1"
    assert cfg["features"]["foo"] is True and cfg["mcp_servers"] == {"docs": {"command": "docs-mcp"}}
    assert "# mine" in text and "foo = true  # keep" in text
    assert "CODEX_HOME" not in got.env
    backups = list((home / ".codex").glob("config.toml.toolserve-backup-*"))
    assert len(backups) == 1 and backups[0].read_text() == before[".codex/config.toml"]
    assert any(str(backups[0]) in line for line in got.written)

    got = configure(CLAUDE, SETUP, [], write_user=True)
    settings = json.loads((home / ".claude/settings.json").read_text())
    assert settings["theme"] == "dark" and settings["env"]["MY_VAR"] == "1" and settings["env"]["ANTHROPIC_MODEL"] == MODEL
    assert "CLAUDE_CONFIG_DIR" not in got.env
    backups = list((home / ".claude").glob("settings.json.toolserve-backup-*"))
    assert len(backups) == 1 and backups[0].read_text() == before[".claude/settings.json"]
    assert not (home / OWN).exists()
    # the same settings again: nothing changes, no second backup
    configure(CLAUDE, SETUP, [], write_user=True)
    assert len(list((home / ".claude").glob("settings.json.toolserve-backup-*"))) == 1


def test_write_config_refuses_a_file_it_cannot_merge(home: Path) -> None:
    (home / ".codex/config.toml").write_text('features = { apps = true }\n')
    with pytest.raises(ToolserveError, match="cannot merge"):
        configure(CODEX, SETUP, [], write_user=True)
    assert (home / ".codex/config.toml").read_text() == 'features = { apps = true }\n'


@pytest.mark.parametrize(
    ("text", "tables", "want"),
    [
        ("", {(): {"a": 1}, ("t",): {"b": "x"}}, 'a = 1\n\n[t]\nb = "x"\n'),
        ('a = 0  # old\nz = 1\n[t]\nb = "y"\n\n', {(): {"a": 1}, ("t",): {"c": True}}, 'a = 1\nz = 1\n[t]\nb = "y"\nc = true\n\n'),
        ("[t]\nb = 1\n", {(): {"a": "q\"uote"}}, 'a = "q\\"uote"\n[t]\nb = 1\n'),
        ('[projects."/a.b"]\nk = 1', {("projects", "/a.b"): {"k": 2}}, '[projects."/a.b"]\nk = 2\n'),
        ("[[arr]]\nk = 1\n", {("arr",): {"k": 2}}, "[[arr]]\nk = 1\n\n[arr]\nk = 2\n"),  # not ours: check_toml refuses it
    ],
)
def test_merge_toml(text: str, tables: Any, want: str) -> None:
    assert files.merge_toml(text, tables) == want


@pytest.mark.parametrize(
    ("lean", "user", "ours"),
    [
        (True, ["-p", "hi"], ["--system-prompt", LEAN_PROMPT, "--tools", "Bash,Read,Edit,Write"]),
        (True, ["--tools", "", "-p", "hi"], ["--system-prompt", LEAN_PROMPT]),
        (True, ["--tools=Bash", "--system-prompt-file", "f"], []),
        (False, ["-p", "hi"], []),
    ],
)
def test_claude_args_leave_the_users_options_alone(lean: bool, user: list[str], ours: list[str]) -> None:
    assert claude_args(Setup("u", MODEL, 8192, lean), user) == ours


def test_split_args_at_the_first_double_dash() -> None:
    assert split_args(["codex", "--model", "m", "--", "exec", "--", "x"]) == (["codex", "--model", "m"], ["exec", "--", "x"])
    assert split_args(["claude"]) == (["claude"], [])


# -- the command --------------------------------------------------------------------------------------

def test_missing_agent_says_how_to_install_it(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(home / "empty"))
    assert main(["codex", "--", "exec", "hi"]) == 127
    assert "npm install -g @openai/codex" in capsys.readouterr().err
    assert main(["claude"]) == 127
    assert "npm install -g @anthropic-ai/claude-code" in capsys.readouterr().err
    assert not (home / OWN).exists()


class FakeToolserve(StubHttp):
    """A server already running: /health and /v1/models, as toolserve answers them."""

    def __init__(self, ctx: int) -> None:
        self.ctx = ctx
        super().__init__()

    async def respond(self, method: str, path: str, body: Any, writer: Any) -> None:
        if path == "/health":
            writer.write(self.reply("200 OK", b'{"status": "ok"}'))
        elif path == "/v1/models":
            card = {"id": MODEL, "object": "model", "max_model_len": self.ctx, "toolserve": {"n_ctx": self.ctx}}
            writer.write(self.reply("200 OK", json.dumps({"object": "list", "data": [card]}).encode()))
        else:
            writer.write(self.reply("404 Not Found", b"{}"))


def fake_agent(folder: Path, name: str, out: Path, code: int) -> None:
    """An agent on PATH that writes its arguments, environment and config to `out`, and exits `code`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, pathlib, sys
        home = os.environ.get("CODEX_HOME") or os.environ.get("CLAUDE_CONFIG_DIR")
        files = {{p.name: p.read_text() for p in pathlib.Path(home).iterdir() if p.is_file()}} if home else {{}}
        pathlib.Path({str(out)!r}).write_text(json.dumps({{"args": sys.argv[1:], "env": dict(os.environ), "files": files}}))
        sys.exit({code})
    """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_url_reuses_a_running_server_and_passes_the_exit_code(home: Path, monkeypatch: pytest.MonkeyPatch, agent: str) -> None:
    srv = FakeToolserve(8192)
    try:
        out = home / "ran.json"
        fake_agent(home / "bin", agent, out, code=3)
        monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
        before = user_files(home)
        assert main([agent, "--url", f"{srv.url}/v1", "--", "-p", "hi"]) == 3
        ran = json.loads(out.read_text())
        assert ran["args"][-2:] == ["-p", "hi"]
        if agent == "codex":
            cfg = tomllib.loads(ran["files"]["config.toml"])
            assert cfg["model_providers"]["toolserve"]["base_url"] == f"{srv.url}/v1" and cfg["model_context_window"] == 8192
        else:
            assert ran["env"]["ANTHROPIC_BASE_URL"] == srv.url and ran["env"]["ANTHROPIC_MODEL"] == MODEL
            assert "--system-prompt" in ran["args"]  # 8192 tokens: lean
        assert user_files(home) == before
        assert not (home / OWN / agent / "server.log").exists()  # no server of its own
    finally:
        srv.stop()


def test_url_with_too_small_a_context_says_what_to_pass(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    srv = FakeToolserve(2048)
    try:
        fake_agent(home / "bin", "codex", home / "ran.json", code=0)
        monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
        assert main(["codex", "--url", srv.url]) == 1
        assert "--ctx-size 6144" in capsys.readouterr().err
        assert not (home / "ran.json").exists()
    finally:
        srv.stop()


def test_url_where_nothing_answers(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import free_port

    fake_agent(home / "bin", "claude", home / "ran.json", code=0)
    monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert main(["claude", "--url", f"http://127.0.0.1:{free_port()}"]) == 1
    assert "nothing answers at" in capsys.readouterr().err
