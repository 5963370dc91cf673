"""`toolserve serve --help` lists its flags in groups a reader scans by topic: every flag in a
named group, none left in the generic "options" section but -h/--help. Groups only change the
help's layout: the flags parse as before (names, defaults), and the flag helpers that `chat`,
`run` and `pull` share still give them the same flags."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from toolserve.cli import build_parser, main

GROUPS = ["model", "server and security", "limits", "engine and memory", "sampling defaults", "upstream", "MCP"]

# where a reader looks for each flag (a sample from every group)
PLACES = {
    "--model": "model", "--model-alias": "model", "--offline": "model", "--hf-token": "model", "--ctx-size": "model",
    "--chat-template": "model", "--tool-format": "model", "--mmproj": "model", "--lora": "model", "--lora-model": "model",
    "--embedding-model": "model", "--rerank-model": "model",
    "--host": "server and security", "--port": "server and security", "--api-key": "server and security",
    "--cors-origins": "server and security", "--model-map": "server and security", "--no-web": "server and security",
    "--allow-image-urls": "server and security", "--allow-private-urls": "server and security",
    "--log-level": "server and security", "--log-prompts": "server and security",
    "--max-n": "limits", "--max-tools": "limits", "--max-queue": "limits", "--request-timeout": "limits", "--max-body-mb": "limits",
    "--threads": "engine and memory", "--parallel": "engine and memory", "--cache-ram": "engine and memory",
    "--cache-type-k": "engine and memory", "--flash-attn": "engine and memory", "--speculative": "engine and memory",
    "--gpu-layers": "engine and memory", "-ngl": "engine and memory", "--no-repack": "engine and memory",
    "--engine-process": "engine and memory", "--no-engine-process": "engine and memory",
    "--engine-timeout": "engine and memory", "--no-core-shares": "engine and memory",
    "--temperature": "sampling defaults", "--top-p": "sampling defaults", "--top-k": "sampling defaults",
    "--min-p": "sampling defaults", "--repetition-penalty": "sampling defaults", "--repeat-penalty": "sampling defaults",
    "--config": "upstream", "--upstream": "upstream", "--upstream-mode": "upstream",
    "--mcp-config": "MCP", "--allow-mcp": "MCP", "--mcp-timeout": "MCP",
}

# `serve` with no flags and no TOOLSERVE_* variables, as the flat parser before the groups gave it
DEFAULTS = {
    "command": "serve", "model": None, "model_alias": None, "offline": False, "ctx_size": 4096, "tool_format": "auto",
    "lora": [], "lora_models": [], "embedding_model": [], "rerank_model": [],
    "host": "127.0.0.1", "port": 8000, "api_key": None, "cors_origins": None, "model_map": [], "no_web": False,
    "allow_image_urls": False, "allow_private_urls": False, "log_level": "info", "log_prompts": False, "shutdown_grace": 10.0,
    "max_n": 16, "max_messages": 2048, "max_tools": 128, "max_queue": 16, "request_timeout": 0.0, "max_body_mb": 8,
    "threads": None, "parallel": 0, "cache_ram": 512, "cache_type_k": "f16", "flash_attn": "auto", "speculative": "auto",
    "gpu_layers": "auto", "split_mode": "layer", "tensor_split": (), "no_repack": False, "engine_process": True,
    "engine_timeout": 120.0, "no_core_shares": False,
    "temperature": None, "top_p": None, "top_k": None, "repetition_penalty": None,
    "config": None, "upstream": None, "upstream_mode": "passthrough", "upstream_timeout": 600.0,
    "mcp_config": None, "allow_mcp": False, "mcp_timeout": 30.0, "mcp_max_output": 100_000,
}


@pytest.fixture(autouse=True)
def plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("TOOLSERVE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "200")  # one line per flag and description: the sections parse simply


def subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]  # type: ignore[no-any-return]


def help_text(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, list[str]]:
    """Each section's title and the option strings listed in it, from argparse's help layout:
    a title alone at the left margin ending in ':', an option indented by two spaces."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.fullmatch(r"\S[^:]*:", line):
            current = line[:-1]
            out[current] = []
        elif current is not None and line.startswith("  -"):
            invocation = re.split(r"\s{2,}", line.strip())[0]
            out[current] += re.findall(r"(?:^|, )(-{1,2}[\w-]+)", invocation)
    return out


def test_serve_help_lists_every_flag_in_a_named_group(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "serve")
    found = sections(text)
    assert list(found) == ["options", *GROUPS]
    assert found["options"] == ["-h", "--help"]
    listed = [flag for title in GROUPS for flag in found[title]]
    assert len(listed) == len(set(listed))  # each flag once
    flags = {flag for action in subparser("serve")._actions for flag in action.option_strings}
    assert set(listed) | {"-h", "--help"} == flags
    for flag, title in PLACES.items():
        assert flag in found[title], (flag, title)


def test_serve_help_says_what_serve_is(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "serve")
    assert "toolserve serve: an OpenAI, Anthropic and Ollama-compatible server on one model or several" in text
    assert "start with no flags for the bundled model" in text
    assert "TOOLSERVE_PORT" in text
    assert len(text.splitlines()[0]) < 80  # the usage line is short: the groups list the flags


def test_every_serve_action_is_in_a_group() -> None:
    """The same, from the parser: no flag added to `serve` itself rather than to a group."""
    serve = subparser("serve")
    titles = [g.title for g in serve._action_groups]
    assert titles[-len(GROUPS):] == GROUPS
    for group in serve._action_groups:
        if group.title not in GROUPS:
            assert [a.dest for a in group._group_actions] in ([], ["help"]), group.title


def test_serve_defaults_are_unchanged() -> None:
    got = vars(build_parser().parse_args(["serve"]))
    assert {k: got.get(k, "missing") for k in DEFAULTS} == DEFAULTS


def test_flags_parse_as_before() -> None:
    args = build_parser().parse_args([
        "serve", "--port", "9", "--repeat-penalty", "1.2", "-ngl", "all", "--no-engine-process", "--max-n", "2",
        "--lora", "a.gguf:0.5", "--lora", "b.gguf", "--model-map", "gpt-*=x", "--mcp-timeout", "3", "--log-level", "debug",
    ])
    assert (args.port, args.repetition_penalty, args.engine_process, args.max_n, args.mcp_timeout, args.log_level) == (9, 1.2, False, 2, 3.0, "debug")
    assert len(args.lora) == 2 and args.model_map == ["gpt-*=x"] and args.gpu_layers is not None


@pytest.mark.parametrize("command", [["chat"], ["run", "hello"]])
def test_chat_and_run_keep_the_shared_flags(command: list[str]) -> None:
    parser = build_parser()
    serve = {a.dest: a.default for a in subparser("serve")._actions}
    args = vars(parser.parse_args([*command, "--threads", "2", "--no-repack", "--offline", "--ctx-size", "512"]))
    assert (args["threads"], args["no_repack"], args["offline"], args["ctx_size"]) == (2, True, True, 512)
    for dest in ("model", "gpu_layers", "speculative", "engine_process", "lora_models", "hf_token", "log_level", "embeddings"):
        assert vars(parser.parse_args(command))[dest] == serve[dest], dest


def test_pull_keeps_the_hub_flags() -> None:
    args = build_parser().parse_args(["pull", "owner/repo", "--offline", "--hf-token", "t"])
    assert (args.offline, args.hf_token) == (True, "t")
