"""Layer placement seen from outside: a real `toolserve serve` on this CPU-only build places no
layer on a GPU by default (auto) and says so in its log, /v1/models and /health; bad placement
settings stop it at start with one line naming the setting."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from tests.conftest import Server, toolserve_command


def test_auto_on_a_cpu_build_reports_no_gpu_layers() -> None:
    srv = Server(["--ctx-size", "512", "--log-level", "info"])
    try:
        card = httpx.get(f"{srv.url}/v1/models").json()["data"][0]
        assert {"id", "object", "created", "owned_by"} <= set(card)  # OpenAI's fields stay
        where = card["toolserve"]["placement"]
        assert where["gpu_backend"] is False
        assert (where["gpu_layers"], where["n_layers"], where["devices"]) == (0, 31, [])
        assert where["chosen"] == "auto; llama.cpp was built without a GPU backend"
        health = httpx.get(f"{srv.url}/health").json()
        assert health["toolserve"]["placement"] == where
        assert "all 31 layers on the CPU (auto; llama.cpp was built without a GPU backend)" in srv.stderr_text()
    finally:
        srv.stop()


def test_config_models_report_their_placement(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - id: a\n    ctx_size: 512\n    gpu_layers: all\n    preload: true\n  - id: b\n    ctx_size: 512\n")
    srv = Server(["--config", str(cfg)])
    try:
        cards = {m["id"]: m for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}
        assert cards["a"]["toolserve"]["placement"]["chosen"] == "--gpu-layers all; llama.cpp was built without a GPU backend"
        assert cards["a"]["toolserve"]["placement"]["gpu_layers"] == 0
        assert "placement" not in cards["b"]["toolserve"]  # not loaded yet
        health = httpx.get(f"{srv.url}/health").json()
        assert health["models"]["a"]["placement"]["n_layers"] == 31
    finally:
        srv.stop()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*toolserve_command(), "serve", *args], capture_output=True, text=True, timeout=120)


def test_bad_flags_stop_the_start() -> None:
    for args, needle in [
        (["--gpu-layers", "most"], "argument --gpu-layers/-ngl: 'most' is not a number of layers, 'all' or 'auto'"),
        (["--split-mode", "tensor"], "argument --split-mode: 'tensor' is not one of none, layer, row"),
        (["--tensor-split", "3,x"], "argument --tensor-split: '3,x' is not a comma-separated list of numbers, e.g. 3,1"),
        (["--tensor-split", "0,0"], "argument --tensor-split: '0,0': expected shares of 0 or more, at least one above 0, e.g. 3,1"),
        (["--main-gpu", "-1"], "argument --main-gpu: '-1' is not a GPU index (0 or more)"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1] == f"toolserve serve: error: {needle}", proc.stderr


def test_bad_config_values_stop_the_start(tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  - id: a\n    gpu_layers: -3\n")
    proc = run("--config", str(cfg))
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"toolserve: error: {cfg}: models[0].gpu_layers: -3 is not a number of layers, 'all' or 'auto'"], proc.stderr
