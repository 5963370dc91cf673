"""A host whose repacked kernels fault (Intel AMX inside some VMs): the server checks at start,
loads with repacking off, says so in one calm INFO line, and answers. A host where the check passes
keeps repacking. The check's child is made to fault (or pass) through its test switch, so this
runs the same on any host."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.conftest import Server
from toolserve.engine.repack import CACHE_FILE, PROBE_ENV

HI = [{"role": "user", "content": "Name three colours."}]


def card(srv: Server) -> dict[str, object]:
    return httpx.get(f"{srv.url}/v1/models", timeout=30).json()["data"][0]  # type: ignore[no-any-return]


def repacking(srv: Server) -> object:
    return card(srv)["toolserve"]["weight_repacking"]  # type: ignore[index]


def remembered(cache: Path) -> list[dict[str, object]]:
    return list(json.loads((cache / CACHE_FILE).read_text()).values())


def test_faulting_host_serves_with_repacking_off(tmp_path: Path) -> None:
    srv = Server(["--ctx-size", "512", "--log-level", "info"], env={"TOOLSERVE_CACHE_DIR": str(tmp_path), PROBE_ENV: "SEGV"})
    try:
        model = card(srv)
        assert model["toolserve"]["weight_repacking"] is False  # type: ignore[index]
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        r = client.chat.completions.create(model=str(model["id"]), messages=HI, max_tokens=8)  # type: ignore[arg-type]
        assert r.choices[0].message.content and r.usage and r.usage.prompt_tokens > 1  # a batch of many tokens ran
    finally:
        srv.stop()
    text = srv.stderr_text()
    lines = [line for line in text.splitlines() if "toolserve.engine.repack" in line]
    assert len(lines) == 1, text
    # a fault is what some CPUs do, and the fallback works: one calm INFO line, no alarm
    assert " INFO toolserve.engine.repack: weights stay in llama.cpp's default layout on this host (the repack check faulted" in lines[0]
    assert "WARNING" not in text and "SIGSEGV" not in text, text
    (entry,) = remembered(tmp_path)
    assert entry["works"] is False and "SIGSEGV" in str(entry["reason"])


def test_passing_host_keeps_repacking(tmp_path: Path) -> None:
    env = {"TOOLSERVE_CACHE_DIR": str(tmp_path), PROBE_ENV: "pass"}
    srv = Server(["--ctx-size", "512"], env=env)
    try:
        assert repacking(srv) is True
    finally:
        srv.stop()
    assert "repacking" not in srv.stderr_text()
    (entry,) = remembered(tmp_path)
    assert entry["works"] is True
    before = (tmp_path / CACHE_FILE).read_text()
    again = Server(["--ctx-size", "512"], env=env)  # the answer is remembered, not checked again
    try:
        assert repacking(again) is True
    finally:
        again.stop()
    assert (tmp_path / CACHE_FILE).read_text() == before


@pytest.mark.parametrize("how", ["flag", "env", "config"])
def test_no_repack_forces_it_off_without_a_check(how: str, tmp_path: Path) -> None:
    env = {"TOOLSERVE_CACHE_DIR": str(tmp_path), PROBE_ENV: "pass"}
    args = ["--ctx-size", "512"]
    if how == "flag":
        args.append("--no-repack")
    elif how == "env":
        env["TOOLSERVE_NO_REPACK"] = "1"
    else:
        config = tmp_path / "models.yaml"
        config.write_text("models:\n  - id: small\n    no_repack: true\n    preload: true\n")
        args += ["--config", str(config)]
    srv = Server(args, env=env)
    try:
        assert repacking(srv) is False
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 4}, timeout=120)
        assert r.status_code == 200
    finally:
        srv.stop()
    assert not (tmp_path / CACHE_FILE).exists()
