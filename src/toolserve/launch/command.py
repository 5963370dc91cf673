"""`toolserve launch AGENT [--model REF] [--url URL] [--write-config] [-- AGENT_ARGS]`: a server
that fits the agent (or one already running), the agent's configuration in a folder of its own,
the agent in the foreground, and the server stopped when the agent exits."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from toolserve.errors import ToolserveError
from toolserve.launch import files
from toolserve.launch.agents import AGENTS, CLAUDE, Agent, Setup, claude_args, claude_env, codex_config, codex_env
from toolserve.launch.fit import fit
from toolserve.launch.server import Started, free_port, local_model, remote_model

# for a model that brings no temperature of its own, instead of the protocol's 1.0: what Qwen3 and
# GLM recommend for agentic use; tool calls are valid whatever the temperature (the grammar), sensible less so
AGENT_TEMPERATURE = 0.6
# environment that would send Claude Code somewhere else than the server
CLAUDE_ELSEWHERE = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolserve launch", description="Run a coding agent on toolserve: a server that fits it (or --url), its configuration, the agent.",
        epilog="Arguments after -- go to the agent, e.g. `toolserve launch codex -- exec 'fix the tests'`.",
    )
    p.add_argument("agent", choices=sorted(AGENTS), help="codex (Codex CLI) or claude (Claude Code)")
    p.add_argument("--model", help="the model: a GGUF path or a reference as `serve --model` takes (default: the bundled SmolLM2); with --url, a model id the server lists (default: its first)")
    p.add_argument("--url", help="use the server running here (http://HOST:PORT) instead of starting one")
    p.add_argument("--api-key", default=os.environ.get("TOOLSERVE_API_KEY") or None, help="the server's --api-key (default: TOOLSERVE_API_KEY)")
    p.add_argument("--ctx-size", type=int, help="context for the server launch starts (default: the agent's preferred, at most the model's trained context)")
    p.add_argument("--prompt", choices=["auto", "full", "lean"], default="auto", help="full: the agent's own prompt and tools; lean: a short prompt and few tools; auto (default): full where the context holds it")
    p.add_argument("--temperature", type=float, help=f"for the agent's requests (default: the model's own, else {AGENT_TEMPERATURE})")
    p.add_argument("--port", type=int, default=0, help="port of the server launch starts (default: a free one; 8000 with --write-config)")
    p.add_argument("--write-config", action="store_true", help="write the settings into your own ~/.codex/config.toml or ~/.claude/settings.json (the old file kept as *.toolserve-backup-TIME), not launch's folder")
    p.add_argument("--offline", action="store_true", help="use only models already on disk")
    p.add_argument("--hf-token", metavar="TOKEN", help="Hugging Face token for gated and private repos")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    return p


def own_dir(agent: Agent) -> Path:
    from toolserve.engine.repack import cache_dir

    return cache_dir() / "launch" / agent.name


@dataclass
class Prepared:
    env: dict[str, str]  # over the user's environment
    args: list[str]  # before the user's arguments
    written: list[str] = field(default_factory=list)  # what changed on disk, for the user


def configure(agent: Agent, s: Setup, user_args: Sequence[str], *, write_user: bool) -> Prepared:
    """Write the agent's configuration: into launch's own folder (the agent pointed at it with
    CODEX_HOME / CLAUDE_CONFIG_DIR), or with `write_user` merged into the user's own file."""
    own = own_dir(agent)
    if agent is CLAUDE:
        env = claude_env(s)
        folder = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") if write_user else own
        out = Prepared({} if write_user else {"CLAUDE_CONFIG_DIR": str(own)}, claude_args(s, user_args))
        out.env.update(env)
        _write_json(folder / "settings.json", {"env": env}, write_user, out)
        if not write_user:  # a new config folder: no first-run theme picker in front of the agent
            state = files.read_json(own / ".claude.json")
            if not state.get("hasCompletedOnboarding"):
                _write_json(own / ".claude.json", {"hasCompletedOnboarding": True}, False, out)
        return out
    tables = codex_config(s)
    folder = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") if write_user else own
    path = folder / "config.toml"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    # our own file is rewritten whole (no key of an earlier launch stays), but the folders Codex was told to trust
    text = files.merge_toml(old, tables) if write_user else files.merge_toml("", {**tables, **files.codex_projects(old)})
    files.check_toml(text, tables, path)
    out = Prepared({**codex_env(s), **({} if write_user else {"CODEX_HOME": str(own)})}, [])
    _note(files.write(path, text, backup=write_user), path, write_user, out)
    return out


def _write_json(path: Path, patch: dict[str, object], backup: bool, out: Prepared) -> None:
    text = json.dumps(files.merge_json(files.read_json(path), patch), indent=2) + "\n"
    _note(files.write(path, text, backup=backup), path, backup, out)


def _note(saved: Path | None, path: Path, user: bool, out: Prepared) -> None:
    if user:
        out.written.append(f"wrote {path}" + (f" (the old one is {saved})" if saved else ""))


def split_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """launch's own arguments, and the agent's: those after the first `--`."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def main(argv: Sequence[str]) -> int:
    ours, agent_args = split_args(argv)
    args = build_parser().parse_args(ours)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return launch(args, agent_args)
    except ToolserveError as exc:
        print(f"toolserve: error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _say(text: str) -> None:
    print(f"toolserve: {text}", file=sys.stderr, flush=True)


def launch(args: argparse.Namespace, agent_args: list[str]) -> int:
    agent = AGENTS[args.agent]
    exe = shutil.which(agent.binary)
    if exe is None:
        _say(f"{agent.title} is not installed (no `{agent.binary}` on PATH). Install it with:\n  {agent.install}")
        return 127
    server: Started | None = None
    url = (args.url or "").rstrip("/").removesuffix("/v1")
    if url:
        if args.ctx_size:
            raise ToolserveError("--ctx-size is for a server launch starts; the server at --url keeps its own")
        model, served = remote_model(url, args.api_key, args.model)
        if served is None:
            _say(f"{url} does not say how large a context it gives {model}: assuming {agent.preferred_ctx:,} tokens")
        got = fit(agent, model, prompt=args.prompt, served=served, url=url)
    else:
        info = local_model(args.model, offline=args.offline, token=args.hf_token)
        model = info.id
        got = fit(agent, model, prompt=args.prompt, trained=info.trained, ctx_flag=args.ctx_size)
        url = f"http://127.0.0.1:{args.port or (8000 if args.write_config else free_port())}"
    if got.note:
        _say(got.note)
    setup = Setup(url, model, got.ctx_size, got.lean, args.api_key)
    prepared = configure(agent, setup, agent_args, write_user=args.write_config)
    for line in prepared.written:
        _say(line)
    restore = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        if not args.url:
            server = _start(args, agent, setup, info.own_sampling)
        return _run([exe, *prepared.args, *agent_args], prepared.env, agent)
    finally:
        if server is not None:
            server.stop()
        for s, handler in restore.items():
            signal.signal(s, handler)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # through the finally that stops the server


def _start(args: argparse.Namespace, agent: Agent, s: Setup, own_sampling: bool) -> Started:
    flags = ["--host", "127.0.0.1", "--port", s.url.rsplit(":", 1)[1], "--ctx-size", str(s.ctx_size), "--log-level", "info"]
    flags += ["--model", args.model] if args.model else []
    flags += ["--offline"] if args.offline else []
    if agent is CLAUDE:  # names Claude Code may still ask for (a subagent's `model: haiku`)
        flags += ["--model-map", f"claude-*={s.model}"]
    temperature = args.temperature if args.temperature is not None else None if own_sampling else AGENT_TEMPERATURE
    flags += ["--temperature", str(temperature)] if temperature is not None else []
    env = dict(os.environ)
    for key, value in (("TOOLSERVE_API_KEY", args.api_key), ("HF_TOKEN", args.hf_token)):
        if value:
            env[key] = value  # not on the command line, where `ps` shows it
    log = own_dir(agent) / "server.log"
    _say(f"starting `toolserve serve {shlex.join(flags)}` (its log: {log})")
    server = Started(flags, s.url, log, env)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    _say(f"serving {s.model} for {agent.title} on {s.url}/v1 (context {s.ctx_size:,} tokens{', lean' if s.lean else ''})")
    return server


def _run(argv: list[str], env: dict[str, str], agent: Agent) -> int:
    """The agent in the foreground with the terminal; its exit status is launch's. Ctrl-C is the
    agent's (it reaches it from the terminal); launch waits for it to exit."""
    child = {k: v for k, v in os.environ.items() if not (agent is CLAUDE and k in CLAUDE_ELSEWHERE)}
    child.update(env)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    proc = subprocess.Popen(argv, env=child, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        code = proc.wait()
    except BaseException:  # launch itself told to stop (SIGTERM, SIGHUP): the agent too
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code
