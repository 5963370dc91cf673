"""Real agents against a real server on the bundled model: OpenAI's Codex CLI (`codex exec`,
Responses API), Claude Code (`claude -p`, Messages API) and the OpenAI Agents SDK (its default
Responses model, with a function tool). The CLIs are installed from the npm registry, pinned,
into ~/.cache/toolserve-tests/npm on first use. Each is set up as docs/protocols-and-agents.md says:
a short system prompt and few tools, since their defaults are larger than SmolLM2's context.
The agents send no temperature: the server runs with `--temperature 0` as its default, so their
turns are greedy and repeatable, and the prompt asks for one word, far from any output limit."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
CODEX = "@openai/codex@0.169.0"
CLAUDE = "@anthropic-ai/claude-code@2.1.197"
CACHE = Path(os.environ.get("TOOLSERVE_TEST_CACHE", Path.home() / ".cache" / "toolserve-tests")) / "npm"


def npm_tool(package: str, binary: str) -> Path:
    """The package's binary, installed (once) under the test cache."""
    where = CACHE / package.replace("/", "+")
    exe = where / "node_modules" / ".bin" / binary
    if not exe.exists():
        where.mkdir(parents=True, exist_ok=True)
        npm = shutil.which("npm")
        assert npm, "these tests need Node.js and npm on PATH"
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(where), package], check=True,
                       capture_output=True, timeout=600)
    return exe


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    # agents send no temperature: the server's default makes their turns greedy, so repeatable
    s = Server(["--ctx-size", "8192", "--model-map", f"claude-*={MODEL}", "--temperature", "0"])
    yield s
    s.stop()


CODEX_CONFIG = """
model = "{model}"
model_provider = "toolserve"
instructions = "Answer with one word."
model_reasoning_summary = "none"
approval_policy = "never"
sandbox_mode = "danger-full-access"
web_search = "disabled"
check_for_update_on_startup = false
include_permissions_instructions = false
include_environment_context = false
project_doc_max_bytes = 0

[analytics]
enabled = false

[history]
persistence = "none"

[skills.bundled]
enabled = false

[agents]
enabled = false

[features]
goals = false
shell_tool = {shell}
view_image = false
plugins = false
apps = false
image_generation = false
memories = false

[model_providers.toolserve]
name = "toolserve"
base_url = "{url}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.mark.parametrize("shell", [False, True])
def test_codex_exec_completes_a_turn(srv: Server, tmp_path: Path, shell: bool) -> None:
    codex = npm_tool(CODEX, "codex")
    home = tmp_path / "codex"
    (home / "work").mkdir(parents=True)
    (home / "config.toml").write_text(CODEX_CONFIG.format(model=MODEL, url=srv.url, shell=str(shell).lower()))
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home)}
    done = subprocess.run(
        [str(codex), "exec", "--strict-config", "--skip-git-repo-check", "--ephemeral",
         "--dangerously-bypass-approvals-and-sandbox", "-C", str(home / "work"), "Reply with the single word: hello"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]  # the model's answer
    # no error of the protocol's; a call the model made that failed to run (SmolLM2 writing to a
    # session it never opened: codex's tools router logs it as an ERROR and hands the model the
    # failure) is the model's turn, not the server's
    ours = [line for line in done.stderr.lower().splitlines() if "codex_core::tools::router" not in line]
    assert "error" not in "\n".join(ours).replace("stream_max_retries", ""), done.stderr[-3000:]


def test_claude_code_completes_a_turn(srv: Server, tmp_path: Path) -> None:
    claude = npm_tool(CLAUDE, "claude")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "dumb",
        "ANTHROPIC_BASE_URL": srv.url, "ANTHROPIC_API_KEY": "unused",
        "ANTHROPIC_MODEL": "claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",  # mapped by --model-map
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1", "DISABLE_PROMPT_CACHING": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "1024", "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    done = subprocess.run(
        [str(claude), "--bare", "--tools", "", "--system-prompt", "Answer with one word.",
         "--max-turns", "2", "--no-session-persistence", "-p", "Reply with the single word: hello"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert done.stdout.strip(), done.stderr[-3000:]


def run_weather_agent(srv: Server, settings: dict[str, Any], streamed: bool = False) -> tuple[list[str], str]:
    """The Agents SDK on its default Responses model with one function tool whose answer is the
    agent's answer (`stop_on_first_tool`: SmolLM2 would ramble on after it). Returns the cities
    the tool was asked for and the final output."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        asked.append(city)
        return f"It is sunny in {city}."

    async def main() -> str:
        set_default_openai_client(AsyncOpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0), use_for_tracing=False)
        set_tracing_disabled(True)
        agent = Agent(name="Weather", instructions="Answer weather questions with the tool.", model=MODEL,
                      tools=[get_weather], tool_use_behavior="stop_on_first_tool", model_settings=ModelSettings(**settings))
        if not streamed:
            return str((await Runner.run(agent, "What's the weather in Paris?", max_turns=4)).final_output)
        run = Runner.run_streamed(agent, "What's the weather in Paris?", max_turns=4)
        async for _ in run.stream_events():
            pass
        return str(run.final_output)

    return asked, asyncio.run(main())


def test_agents_sdk_runs_an_agent_with_a_function_tool(srv: Server) -> None:
    asked, final = run_weather_agent(srv, {"tool_choice": "required", "parallel_tool_calls": False, "temperature": 0, "max_tokens": 64})
    assert len(asked) == 1 and asked[0]  # the SDK ran our tool with the model's arguments
    assert final == f"It is sunny in {asked[0]}."


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_required_tool_as_a_new_user_runs_it_once(srv: Server, streamed: bool) -> None:
    """Issue 32: tool_choice required with parallel calls allowed (the SDK's default) made the
    model write the same call again until max_tokens; the run ended `incomplete` with `<tool` as
    text and the SDK raised. A repeated call now ends the answer, and no cut marker is text."""
    asked, final = run_weather_agent(srv, {"tool_choice": "required", "max_tokens": 64}, streamed)
    assert asked and final == f"It is sunny in {asked[0]}."


def test_server_sampling_defaults_apply_on_every_protocol_only_when_unset(srv: Server) -> None:
    """`--temperature 0`: a request that sends no temperature is greedy, on all three
    protocols; one that sends a temperature gets it."""
    import anthropic
    from openai import OpenAI

    ask = "Write a short poem about the sea."
    oa = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
    greedy = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ask}], max_tokens=24, temperature=0)
    text = greedy.choices[0].message.content
    unset = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ask}], max_tokens=24)
    assert unset.choices[0].message.content == text
    hot = oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ask}], max_tokens=24, temperature=1.8, seed=7)
    assert hot.choices[0].message.content != text  # an explicit temperature is the client's
    assert oa.responses.create(model=MODEL, input=ask, max_output_tokens=24).output_text == text
    claude = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=120)
    msg = claude.messages.create(model="claude-x", max_tokens=24, messages=[{"role": "user", "content": ask}])
    assert "".join(b.text for b in msg.content if b.type == "text") == text
