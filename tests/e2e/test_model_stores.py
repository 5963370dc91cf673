"""Models other programs downloaded, used where they are: an Ollama store (manifests + blobs,
OLLAMA_MODELS) and an LM Studio folder (~/.lmstudio/models) laid out on disk, listed by
`toolserve models`, served by reference from the command line and from models.yaml without a
copy, and left alone by `toolserve rm`, which deletes only what `toolserve pull` downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server
from tests.e2e.test_hub import SMOL, cli, error_line, hub_env
from tests.hub_stub import StubHub
from toolserve.models.files import bundled_model

LMS_REPO = "lmstudio-community/SmolLM2-135M-Instruct-GGUF"
LMS_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
GO_TEMPLATE = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"


def place(src: Path, dst: Path) -> None:
    """The file as the other program keeps it (a hard link where it can: no 98 MB copy per test)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def ollama_store(root: Path, name: str, tag: str, files: dict[str, Path | bytes]) -> dict[str, Path]:
    """An Ollama store holding library/NAME:TAG with a layer per media type in `files`."""
    layers, blobs = [], {}
    for kind, content in files.items():
        data = content if isinstance(content, bytes) else None
        digest = hashlib.sha256(data if data is not None else Path(str(content)).read_bytes()).hexdigest()
        blob = root / "blobs" / f"sha256-{digest}"
        if data is not None:
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
        else:
            place(Path(str(content)), blob)
        layers.append({"mediaType": f"application/vnd.ollama.image.{kind}", "digest": f"sha256:{digest}", "size": blob.stat().st_size})
        blobs[kind] = blob
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": layers}))
    return blobs


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and inode: what must not change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_ino) for p in sorted(root.rglob("*")) if p.is_file()}


def untouched(stores: dict[str, Any]) -> dict[str, dict[str, tuple[int, int]]]:
    """The two stores and the Hugging Face cache, as they are now."""
    return {k: tree(stores[k]) for k in ("ollama", "lms")} | {"hf": tree(stores["tmp"] / "hf")}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A stand-in Hub, and a home with an Ollama store (a text model with Ollama's parameters,
    a vision model with its projector blob) and an LM Studio folder."""
    from tests.vision.make_tiny_vlm import build

    text, mmproj = build()
    tmp = tmp_path_factory.mktemp("stores")
    hub = StubHub()
    hub.add(SMOL, {"SmolLM2-135M-Instruct-Q4_K_M.gguf": bundled_model(), "SmolLM2-135M-Instruct-Q8_0.gguf": text})
    env = hub_env(hub, tmp)
    ollama = tmp / "ollama"
    smol = ollama_store(ollama, "smol", "latest", {"model": bundled_model(), "template": GO_TEMPLATE.encode(), "params": json.dumps({"temperature": 0.0, "stop": ["<|im_end|>"]}).encode()})
    vl = ollama_store(ollama, "tiny-vl", "2b", {"model": text, "projector": mmproj})
    lms = tmp / "home" / ".lmstudio" / "models" / LMS_REPO
    place(bundled_model(), lms / LMS_FILE)
    env["OLLAMA_MODELS"] = str(ollama)
    yield {"env": env, "hub": hub, "tmp": tmp, "ollama": ollama, "smol": smol, "vl": vl, "lms": lms}
    hub.stop()


def listing(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = cli("models", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return {row["reference"]: row for row in map(json.loads, done.stdout.splitlines())}


def test_ollama_and_lm_studio_models_are_listed(stores: dict[str, Any]) -> None:
    rows = listing(stores["env"])
    assert set(rows) == {"ollama:smol:latest", "ollama:tiny-vl:2b", f"lmstudio:{LMS_REPO}/{LMS_FILE}"}
    smol, vl, lms = rows["ollama:smol:latest"], rows["ollama:tiny-vl:2b"], rows[f"lmstudio:{LMS_REPO}/{LMS_FILE}"]
    assert (smol["source"], smol["path"], smol["architecture"], smol["quantization"], smol["tool_format"], smol["vision"]) == (
        "ollama", str(stores["smol"]["model"]), "llama", "Q4_1", "hermes", False,  # Q4_1 from the header: a blob's name has no tag
    )
    assert smol["size_bytes"] == bundled_model().stat().st_size and smol["context_length"] == 8192
    assert (vl["architecture"], vl["vision"], vl["mmproj"]) == ("qwen2vl", True, str(stores["vl"]["projector"]))
    assert (lms["source"], lms["path"], lms["quantization"]) == ("lmstudio", str(stores["lms"] / LMS_FILE), "Q4_K_M")
    table = cli("models", env=stores["env"]).stdout.splitlines()
    assert table[0].split() == ["REFERENCE", "SIZE", "ARCH", "QUANT", "CONTEXT", "TOOLS", "VISION", "PATH"]
    assert any(line.startswith("ollama:smol:latest ") and " 98 MB " in line for line in table)


def test_served_in_place_from_the_command_line(stores: dict[str, Any]) -> None:
    env = {**stores["env"]}
    before = untouched(stores)
    srv = Server(["--model", "ollama:smol", "--ctx-size", "512", "--log-level", "info"], env=env)
    try:
        model = httpx.get(f"{srv.url}/v1/models").json()["data"][0]
        ts = model["toolserve"]
        assert (model["id"], ts["reference"], ts["source"], ts["path"]) == ("smol", "ollama:smol:latest", "ollama", str(stores["smol"]["model"]))
        assert ts["chat_template"] == "gguf"  # its own template detection on the GGUF, not Ollama's Go template
        assert ts["sampling_defaults"]["temperature"] == {"value": 0.0, "source": "ollama (ollama:smol:latest)"}
        body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12}
        answers = {httpx.post(f"{srv.url}/v1/chat/completions", json={**body, "seed": s}, timeout=120).json()["choices"][0]["message"]["content"] for s in (1, 2, 3)}
        assert len(answers) == 1  # Ollama's temperature 0 applies to a request that sends none
    finally:
        srv.stop()
    log = srv.stderr_text()
    assert "smol: chat template from the GGUF (gguf); Ollama's Go template is not used" in log
    srv = Server(["--model", f"lmstudio:{LMS_REPO}", "--ctx-size", "512", "--embedding-model", "ollama:tiny-vl:2b"], env=env)
    try:
        chat_model, embedder = httpx.get(f"{srv.url}/v1/models").json()["data"]
        ts = chat_model["toolserve"]
        assert (ts["reference"], ts["source"], ts["path"]) == (f"lmstudio:{LMS_REPO}", "lmstudio", str(stores["lms"] / LMS_FILE))
        assert embedder["id"] == "tiny-vl:2b"  # --embedding-model takes references too
        r = httpx.post(f"{srv.url}/v1/embeddings", json={"model": "tiny-vl:2b", "input": "the sea"}, timeout=120)
        assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) > 0
    finally:
        srv.stop()
    assert untouched(stores) == before  # nothing written into either store, nothing downloaded
    ours = stores["tmp"] / "toolserve"  # toolserve's own folder holds no copy either
    assert all(p.stat().st_size < 1_000_000 for p in ours.rglob("*") if p.is_file())


def test_served_in_place_from_models_yaml(stores: dict[str, Any], tmp_path: Path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(f"""
keep_alive: null
models:
  - model: ollama:tiny-vl:2b
    ctx_size: 512
    threads: 1
  - model: lmstudio:{LMS_REPO}/{LMS_FILE}
    ctx_size: 512
  - id: hub-q8
    model: {SMOL}:Q8_0
    ctx_size: 512
""")
    srv = Server(["--config", str(config)], env=stores["env"])
    try:
        cards = {m["id"]: m["toolserve"] for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}
        assert set(cards) == {"tiny-vl:2b", "SmolLM2-135M-Instruct-Q4_K_M", "hub-q8"}
        assert cards["tiny-vl:2b"]["path"] == str(stores["vl"]["model"]) and cards["tiny-vl:2b"]["loaded"] is False
        for model in cards:
            r = httpx.post(f"{srv.url}/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=300)
            assert r.status_code == 200, r.text
        cards = {m["id"]: m["toolserve"] for m in httpx.get(f"{srv.url}/v1/models").json()["data"]}
        assert cards["tiny-vl:2b"]["vision"] is True  # the projector blob of Ollama's manifest
        assert cards["hub-q8"]["reference"] == f"{SMOL}:Q8_0" and cards["hub-q8"]["architecture"] == "qwen2vl"
    finally:
        srv.stop()
    assert stores["hub"].seen("GET", "/resolve/main/SmolLM2-135M-Instruct-Q8_0.gguf")  # pulled at start, from the file


def test_rm_deletes_only_what_toolserve_downloaded(stores: dict[str, Any]) -> None:
    env, tmp = stores["env"], stores["tmp"]
    others = {k: tree(stores[k]) for k in ("ollama", "lms")}
    assert "is Ollama's: `ollama rm smol:latest` removes it" in error_line(cli("rm", "ollama:smol", env=env))
    assert "is LM Studio's: delete it in LM Studio" in error_line(cli("rm", f"lmstudio:{LMS_REPO}", env=env))
    assert "is not a Hub reference" in error_line(cli("rm", str(stores["lms"] / LMS_FILE), env=env))
    # a file another program put in the Hugging Face cache
    other = tmp / "hf" / "hub" / "models--someone--other-GGUF"
    place(bundled_model(), other / "blobs" / "abc123")
    (other / "snapshots" / "c0ffee").mkdir(parents=True)
    (other / "snapshots" / "c0ffee" / "o-Q4_K_M.gguf").symlink_to("../../blobs/abc123")
    (other / "refs").mkdir()
    (other / "refs" / "main").write_text("c0ffee")
    assert "someone/other-GGUF:Q4_K_M" in listing(env)
    assert "toolserve did not download someone/other-GGUF (another program put it in the Hugging Face cache" in error_line(cli("rm", "someone/other-GGUF", env=env))
    assert (other / "blobs" / "abc123").is_file()
    # what toolserve pulled goes, quantisation by quantisation, then the repo's folder
    assert cli("pull", SMOL, env=env).returncode == 0
    assert cli("pull", f"{SMOL}:Q8_0", env=env).returncode == 0
    gone = cli("rm", f"{SMOL}:Q8_0", env=env)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.splitlines() == ["deleted SmolLM2-135M-Instruct-Q8_0.gguf"]
    assert f"{SMOL}:Q8_0" not in listing(env) and f"{SMOL}:Q4_K_M" in listing(env)
    assert cli("rm", SMOL, env=env).stdout.splitlines() == ["deleted SmolLM2-135M-Instruct-Q4_K_M.gguf"]
    assert not (tmp / "hf" / "hub" / f"models--{SMOL.replace('/', '--')}").exists()
    assert f"{SMOL} is not in the Hugging Face cache" in error_line(cli("rm", SMOL, env=env))
    assert {k: tree(stores[k]) for k in ("ollama", "lms")} == others
