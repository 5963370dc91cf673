"""The agents `toolserve launch` runs: how each is installed, how large its own prompt is, and
the configuration that points it at toolserve. Pure: a Setup in, config tables, environment and
arguments out (files.py writes them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Each agent's first request with launch's settings, measured on the bundled SmolLM2 (its
# tokenizer) against `toolserve serve`: full is the agent's own prompt and tool list, lean is
# LEAN_PROMPT with the tools below. Other tokenizers differ, hence the margin in min_ctx.
LEAN_PROMPT = (
    "You are a coding assistant in a terminal. Use the tools to read, change and run the code in "
    "the current folder. Answer briefly."
)
MARGIN = 1.25  # other tokenizers take up to a quarter more tokens for the same text
ROOM = 4096  # tokens for the answer and a few turns on top of the first prompt


@dataclass(frozen=True)
class Setup:
    """What launch decided: the server the agent talks to, and how."""

    url: str  # the server's root, http://HOST:PORT (no /v1)
    model: str  # the served model id
    ctx_size: int  # the context a request gets
    lean: bool  # a short prompt and few tools: the agent's own do not fit the context
    api_key: str | None = None


@dataclass(frozen=True)
class Agent:
    name: str  # what `toolserve launch NAME` takes
    title: str
    binary: str
    install: str
    full_tokens: int  # the agent's own prompt and tools
    lean_tokens: int
    preferred_ctx: int  # what launch asks for when the model was trained on as much
    lean_tools: str  # in words, for messages

    def min_ctx(self, lean: bool) -> int:
        """The smallest context the agent works in: its first prompt (with a tokenizer margin)
        and ROOM, rounded up to 1024."""
        need = int((self.lean_tokens if lean else self.full_tokens) * MARGIN) + ROOM
        return -(-need // 1024) * 1024


CODEX = Agent("codex", "Codex CLI", "codex", "npm install -g @openai/codex", 8978, 1222, 32768, "the shell tool only")
CLAUDE = Agent(
    "claude", "Claude Code", "claude", "npm install -g @anthropic-ai/claude-code", 29223, 2069, 65536,
    "the Bash, Read, Edit and Write tools",
)
AGENTS = {a.name: a for a in (CODEX, CLAUDE)}

Tables = dict[tuple[str, ...], dict[str, Any]]  # TOML: table path -> its keys (() is the root)


def codex_config(s: Setup) -> Tables:
    """CODEX_HOME/config.toml: a model provider on the server's Responses API, and off what
    needs OpenAI's own services (web search, plugins and apps, hosted image generation)."""
    provider: dict[str, Any] = {
        "name": "toolserve", "base_url": f"{s.url}/v1", "wire_api": "responses",
        # a long prompt on a CPU can take minutes before the first token
        "stream_idle_timeout_ms": 1_800_000,
    }
    if s.api_key:
        provider["env_key"] = "TOOLSERVE_API_KEY"
    tables: Tables = {
        (): {
            "model": s.model, "model_provider": "toolserve", "model_context_window": s.ctx_size,
            "web_search": "disabled", "check_for_update_on_startup": False,
        },
        ("analytics",): {"enabled": False},
        ("features",): {"plugins": False, "apps": False, "image_generation": False},
        ("model_providers", "toolserve"): provider,
    }
    if s.lean:  # the short setup of docs/protocols-and-agents.md, as tests/e2e/test_agents.py runs it
        tables[()].update({
            "instructions": LEAN_PROMPT, "model_reasoning_summary": "none", "include_permissions_instructions": False,
            "include_environment_context": False, "project_doc_max_bytes": 0,
        })
        tables[("features",)].update({"shell_tool": True, "view_image": False, "memories": False, "goals": False})
        tables[("agents",)] = {"enabled": False}
        tables[("skills", "bundled")] = {"enabled": False}
    return tables


def codex_env(s: Setup) -> dict[str, str]:
    return {"TOOLSERVE_API_KEY": s.api_key} if s.api_key else {}


def claude_env(s: Setup) -> dict[str, str]:
    """Claude Code's environment: every model tier on the served model (a server launch starts
    also maps `claude-*` names to it), auto-compaction at the server's context, no traffic to
    Anthropic's services."""
    return {
        "ANTHROPIC_BASE_URL": s.url,
        # a bearer token, not ANTHROPIC_API_KEY: with an API key Claude Code first asks whether to use it
        "ANTHROPIC_AUTH_TOKEN": s.api_key or "toolserve",
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": s.model,
        "ANTHROPIC_SMALL_FAST_MODEL": s.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": s.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": s.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": s.model,
        "CLAUDE_CODE_SUBAGENT_MODEL": s.model,
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(s.ctx_size),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(min(32000, s.ctx_size // 4)),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
        "DISABLE_PROMPT_CACHING": "1",
    }


def claude_args(s: Setup, user_args: Sequence[str]) -> list[str]:
    """Lean: a short system prompt and four tools, each left out where the user's own arguments
    give that option (Claude Code keeps the first --tools it is given)."""
    if not s.lean:
        return []
    ours = {"--system-prompt": LEAN_PROMPT, "--tools": "Bash,Read,Edit,Write"}
    given = {a.split("=", 1)[0] for a in user_args}
    if "--system-prompt-file" in given:
        given.add("--system-prompt")
    return [part for flag, value in ours.items() if flag not in given for part in (flag, value)]
