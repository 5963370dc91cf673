"""Several models from one --config file: routing by `model`, lazy loading, the memory budget,
idle and explicit unloading, a local and an upstream model side by side."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, toolserve_command
from tests.e2e.test_load import NO_EOS

HI = [{"role": "user", "content": "Say hello."}]


def models(srv: Server) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}


def loaded(srv: Server) -> dict[str, bool]:
    return {k: v["toolserve"]["loaded"] for k, v in models(srv).items()}


def chat(srv: Server, model: str | None, **extra: Any) -> httpx.Response:
    body = {"messages": HI, "max_tokens": 4, **extra, **({"model": model} if model else {})}
    return httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=120)


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "models.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def budget(tmp_path_factory: pytest.TempPathFactory, gemma_path: str, server: Server, model_id: str) -> Iterator[Server]:
    """Two local models that do not fit the budget together (about 150 and 290 MB of 400),
    never unloaded when idle, and an upstream model (the session's toolserve) beside them."""
    path = config(tmp_path_factory.mktemp("budget"), f"""
memory_mb: 400
keep_alive: null
models:
  - id: smol
    ctx_size: 1024
    parallel: 1
    cache_ram: 32
  - id: gemma
    model: {gemma_path}
    ctx_size: 1024
    parallel: 1
    cache_ram: 32
  - id: remote
    url: {server.url}
    upstream_model: {model_id}
""")
    srv = Server(["--config", path])
    yield srv
    srv.stop()


def test_nothing_is_loaded_before_it_is_used(budget: Server) -> None:
    listed = models(budget)
    assert list(listed) == ["smol", "gemma", "remote"]
    assert [m["toolserve"]["backend"] for m in listed.values()] == ["local", "local", "upstream"]
    assert loaded(budget)["smol"] is False and loaded(budget)["gemma"] is False
    assert listed["smol"]["toolserve"]["memory_estimate_mb"] == pytest.approx(148, abs=2)
    health = httpx.get(f"{budget.url}/health").json()
    assert health["status"] == "ok" and health["model"] == "smol"
    assert health["models"]["gemma"]["state"] == "unloaded"


def test_routing_lazy_load_and_the_budget(budget: Server) -> None:
    r = chat(budget, "smol")
    assert r.status_code == 200 and r.json()["model"] == "smol"
    assert loaded(budget) == {"smol": True, "gemma": False, "remote": True}
    assert chat(budget, None).json()["model"] == "smol"  # no model: the first one
    r = chat(budget, "gemma")
    assert r.status_code == 200 and r.json()["model"] == "gemma"
    assert loaded(budget) == {"smol": False, "gemma": True, "remote": True}  # smol made room
    r = chat(budget, "remote")
    assert r.status_code == 200 and r.json()["model"] == "remote"
    unknown = chat(budget, "nope")
    assert unknown.status_code == 404
    assert "'smol', 'gemma', 'remote'" in unknown.json()["error"]["message"]
    health = httpx.get(f"{budget.url}/health").json()["models"]
    assert health["gemma"]["requests"] >= 1 and health["smol"]["loads"] == 1


def test_concurrent_first_requests_share_one_load(budget: Server) -> None:
    httpx.post(f"{budget.url}/v1/models/smol/unload", timeout=60)
    before = models(budget)["smol"]["toolserve"]["loads"]

    async def three() -> list[int]:
        async with httpx.AsyncClient(base_url=budget.url, timeout=120) as c:
            rs = await asyncio.gather(*(c.post("/v1/chat/completions", json={"model": "smol", "messages": HI, "max_tokens": 3}) for _ in range(3)))
            return [r.status_code for r in rs]

    assert asyncio.run(three()) == [200, 200, 200]
    assert models(budget)["smol"]["toolserve"]["loads"] == before + 1


def test_explicit_unload(budget: Server) -> None:
    assert chat(budget, "smol").status_code == 200
    with httpx.stream("POST", f"{budget.url}/v1/chat/completions", timeout=120,
                      json={"model": "smol", "messages": HI, "max_tokens": 1000, "logit_bias": NO_EOS, "stream": True}) as s:
        lines = s.iter_lines()
        next(lines)
        busy = httpx.post(f"{budget.url}/v1/models/smol/unload", timeout=60)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "model_busy"
    deadline = time.monotonic() + 30
    while (r := httpx.post(f"{budget.url}/v1/models/smol/unload", timeout=60)).status_code == 409:
        assert time.monotonic() < deadline  # the closed stream's generation ends
        time.sleep(0.1)
    assert r.status_code == 200
    assert r.json()["id"] == "smol" and r.json()["toolserve"]["loaded"] is False and r.json()["toolserve"]["state"] == "unloaded"
    assert httpx.post(f"{budget.url}/v1/models/smol/unload", timeout=60).status_code == 200  # already free: fine
    assert httpx.post(f"{budget.url}/v1/models/nope/unload", timeout=60).status_code == 404
    assert httpx.post(f"{budget.url}/v1/models/remote/unload", timeout=60).status_code == 400
    assert chat(budget, "smol").status_code == 200  # loads again on use


def test_metrics_per_model(budget: Server) -> None:
    chat(budget, "smol")
    text = httpx.get(f"{budget.url}/metrics").text
    assert 'toolserve_completion_tokens_total{model="smol"}' in text
    assert 'toolserve_model_loaded{model="smol"} 1.0' in text
    assert 'toolserve_model_loaded{model="remote"} 1.0' in text
    assert 'toolserve_requests_total{route="/v1/models/{id}/unload",status="200"}' in text


def test_idle_models_unload_after_keep_alive(tmp_path: Path, gemma_path: str) -> None:
    path = config(tmp_path, f"""
keep_alive: 2
models:
  - id: smol
    ctx_size: 512
    cache_ram: 0
  - id: gemma
    model: {gemma_path}
    ctx_size: 512
    cache_ram: 0
    keep_alive: 600
    preload: true
""")
    srv = Server(["--config", path])
    try:
        assert loaded(srv) == {"smol": False, "gemma": True}  # preloaded
        assert chat(srv, "smol").status_code == 200
        assert loaded(srv)["smol"] is True
        deadline = time.monotonic() + 15
        while loaded(srv)["smol"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert loaded(srv) == {"smol": False, "gemma": True}  # its own keep_alive keeps gemma
        assert chat(srv, "smol").status_code == 200
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models:\n  - id: a\n    ctx: 1\n", "unknown key 'ctx'"),
        ("models:\n  - id: a\n    model: /no/such.gguf\n", "model file not found: /no/such.gguf"),
        ("memory_mb: 20\nmodels:\n  - id: a\n", "more than the memory budget of 20 MB"),
    ],
)
def test_config_errors_exit_1_with_one_line(tmp_path: Path, text: str, needle: str) -> None:
    proc = subprocess.run([*toolserve_command(), "serve", "--port", "0", "--config", config(tmp_path, text)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_config_excludes_model_flags(tmp_path: Path) -> None:
    proc = subprocess.run([*toolserve_command(), "serve", "--port", "0", "--model", "x.gguf", "--config", config(tmp_path, "models:\n  - id: a\n")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "--config lists the models; drop --model" in proc.stderr


def test_the_single_model_can_be_unloaded_and_comes_back() -> None:
    srv = Server(["--ctx-size", "512", "--model-alias", "one"])
    try:
        assert httpx.get(f"{srv.url}/health").json()["toolserve"]["slots"] == 8  # the single-model shape; 8 sequences at 512 tokens
        r = httpx.post(f"{srv.url}/v1/models/one/unload", timeout=60)
        assert r.status_code == 200 and r.json()["toolserve"]["loaded"] is False
        assert chat(srv, "one").status_code == 200  # loaded again, with the same settings
        card = models(srv)["one"]
        assert card["toolserve"]["loaded"] is True and card["max_model_len"] == 512 and card["toolserve"]["loads"] == 2
    finally:
        srv.stop()
