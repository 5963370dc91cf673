"""`toolserve launch` end to end: the real Codex CLI and Claude Code (installed as
test_agents.py installs them) on a server launch starts with the bundled model, answering to a
final message, with the user's own ~/.codex and ~/.claude files unchanged after; and the server
stopped when the agent exits, also on Ctrl-C and on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import toolserve_command
from tests.e2e.test_agents import CLAUDE, CODEX, npm_tool

SENTINELS = {
    ".codex/config.toml": '# the user\'s own\nmodel = "gpt-5"\n',
    ".claude/settings.json": '{"theme": "light"}\n',
    ".claude.json": '{"numStartups": 7}\n',
}


def user_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for name, text in SENTINELS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (home / "work").mkdir()
    return home


def launch_env(home: Path, bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLSERVE_CACHE_DIR", "XDG_CACHE_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR")}
    return {**env, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "TERM": "dumb"}


def served_url(stderr: str) -> str:
    m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", stderr)
    assert m, stderr[-3000:]
    return m.group(1)


def is_down(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.HTTPError:
        return True
    return False


def check_home(home: Path) -> None:
    for name, text in SENTINELS.items():
        assert (home / name).read_text() == text, name
    assert not list(home.rglob("*toolserve-backup*"))


@pytest.mark.parametrize(
    ("agent", "package", "args"),
    [
        # the lean setup keeps Codex's shell tool; --strict-config: every key launch wrote is one Codex 0.169 knows
        ("codex", CODEX, ["exec", "--strict-config", "--skip-git-repo-check", "--ephemeral", "Reply with the single word: hello"]),
        # no tools: the 135M model, offered Bash, calls it turn after turn
        ("claude", CLAUDE, ["--tools", "", "--system-prompt", "Answer with one word.", "--max-turns", "2",
                            "--no-session-persistence", "-p", "Reply with the single word: hello"]),
    ],
)
def test_launch_runs_the_agent_to_an_answer(tmp_path: Path, agent: str, package: str, args: list[str]) -> None:
    exe = npm_tool(package, agent)
    home = user_home(tmp_path)
    done = subprocess.run(
        [*toolserve_command(), "launch", agent, "--temperature", "0", "--", *args], cwd=home / "work",
        env=launch_env(home, exe.parent), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=400,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert done.stdout.strip(), done.stderr[-3000:]  # the model's answer
    assert "runs with a short prompt" in done.stderr  # SmolLM2's 8192 tokens: lean, and it says so
    assert is_down(served_url(done.stderr))
    check_home(home)
    own = home / ".cache" / "toolserve" / "launch" / agent
    assert (own / ("config.toml" if agent == "codex" else "settings.json")).exists()


AGENT_THAT_WAITS = f"""\
#!{sys.executable}
import pathlib, sys, time
pathlib.Path(sys.argv[-1]).write_text("running")
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_the_server_stops_with_the_agent(tmp_path: Path, how: str) -> None:
    """Ctrl-C reaches the whole foreground group: the agent dies of it, launch waits, then stops
    the server (which, in a session of its own, never saw it). SIGTERM to launch alone too."""
    home = user_home(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(textwrap.dedent(AGENT_THAT_WAITS))
    (bin_dir / "codex").chmod(0o755)
    mark = tmp_path / "running"
    proc = subprocess.Popen(
        [*toolserve_command(), "launch", "codex", "--", str(mark)], env=launch_env(home, bin_dir),
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert mark.exists(), proc.stderr.read() if proc.poll() is not None else "the agent did not start"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + (signal.SIGINT if how == "ctrl-c" else signal.SIGTERM), err[-2000:]
    assert is_down(served_url(err))
    check_home(home)
