"""Models by name from a stand-in Hugging Face Hub (tests/hub_stub.py, reached through
HF_ENDPOINT): pull and serve by reference, the quantisation choice, split files, a projector
beside a vision model, a download cut off or killed that resumes, a corrupted body refused by
its checksum, gated / private / missing repos, and offline use. Each test has its own HF_HOME."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, toolserve_command
from tests.gguf_copies import split
from tests.hub_stub import StubHub
from toolserve.models.files import bundled_model

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
Q4 = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
Q8 = "SmolLM2-135M-Instruct-Q8_0.gguf"
HI = [{"role": "user", "content": "Say hello."}]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def tiny_vlm() -> tuple[Path, Path]:
    from tests.vision.make_tiny_vlm import build

    return build()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, tiny_vlm: tuple[Path, Path]) -> Iterator[StubHub]:
    bundled = bundled_model()
    text, mmproj = tiny_vlm
    files = tmp_path_factory.mktemp("hub-files")
    (files / "README.md").write_text("# a model card\n")
    (files / "config.json").write_text("{}\n")
    (files / "model.safetensors").write_bytes(b"\0" * 64)
    parts = split(bundled, files / "split", "smol-Q4_K_M", 3)
    hub = StubHub()
    hub.add(SMOL, {Q4: bundled, Q8: text, "README.md": files / "README.md"})  # Q8_0: another model, to see which one loads
    hub.add("test/split-GGUF", {p.name: p for p in parts})
    hub.add("test/tiny-vl-GGUF", {"tiny-qwen2vl-f16.gguf": text, "mmproj-tiny-qwen2vl-f16.gguf": mmproj})
    for name in ("resume", "killed", "corrupt"):
        hub.add(f"test/{name}-GGUF", {"m-Q4_K_M.gguf": bundled})
    hub.add("test/gated-GGUF", {"g-Q4_K_M.gguf": text}, gated=True, granted={"hf_granted"})
    hub.add("test/private-GGUF", {"p-Q4_K_M.gguf": text}, private=True, granted={"hf_granted"})
    hub.add("test/safetensors-only", {n: files / n for n in ("README.md", "config.json", "model.safetensors")})
    hub.tokens |= {"hf_granted", "hf_not_granted"}
    yield hub
    hub.stop()


def hub_env(hub: StubHub | str, tmp: Path, **extra: str) -> dict[str, str]:
    """A fresh Hugging Face home and toolserve cache, the stand-in Hub, no token, no other stores."""
    (tmp / "home").mkdir(exist_ok=True)
    return {
        "HF_ENDPOINT": hub if isinstance(hub, str) else hub.url, "HF_HOME": str(tmp / "hf"), "HF_TOKEN": "",
        "HF_HUB_DISABLE_TELEMETRY": "1", "TOOLSERVE_CACHE_DIR": str(tmp / "toolserve"), "HOME": str(tmp / "home"),
        "OLLAMA_MODELS": str(tmp / "no-ollama"), "HF_HUB_OFFLINE": "0", **extra,
    }


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*toolserve_command(), *args], capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command (log lines before it are progress)."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("toolserve: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def card(srv: Server, index: int = 0) -> dict[str, Any]:
    return httpx.get(f"{srv.url}/v1/models").json()["data"][index]  # type: ignore[no-any-return]


def chat(srv: Server, **body: Any) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 16, **body}, timeout=300)


def snapshot(tmp: Path, repo: str) -> Path:
    return tmp / "hf" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / "0123456789abcdef0123456789abcdef01234567"


def test_pull_then_serve_by_reference(hub: StubHub, tmp_path: Path) -> None:
    env = hub_env(hub, tmp_path)
    first = cli("pull", SMOL, env=env)
    assert first.returncode == 0, first.stderr
    path = snapshot(tmp_path, SMOL) / Q4
    assert f"{SMOL}: downloaded, {path} (98 MB)" in first.stdout
    # the standard cache: the snapshot points at a blob named by the file's sha256, which it has
    assert path.is_symlink() and path.resolve().name == sha256(bundled_model()) == sha256(path)
    assert [r.path for r in hub.seen("GET", f"/{SMOL}/resolve/")] == [f"/{SMOL}/resolve/main/{Q4}"]  # Q4_K_M only
    again = cli("pull", SMOL, env=env)
    assert f"{SMOL}: already on disk" in again.stdout
    assert len(hub.seen("GET", f"/{SMOL}/resolve/")) == 1
    srv = Server(["--model", SMOL, "--ctx-size", "1024"], env=env)
    try:
        model = card(srv)
        assert model["id"] == "SmolLM2-135M-Instruct"  # the repo's name without -GGUF
        ts = model["toolserve"]
        assert (ts["reference"], ts["source"], ts["path"], ts["quantization"], ts["architecture"]) == (SMOL, "hf", str(path), "Q4_K_M", "llama")
        assert chat(srv, model="SmolLM2-135M-Instruct").status_code == 200
        assert chat(srv, model=SMOL).status_code == 200  # the reference itself names it too
        assert chat(srv, model="SmolLM2-135M-Instruct:Q8_0").status_code == 404
        asked = len(hub.requests)
        # a request cannot make the server download: another reference is an unknown model
        refused = chat(srv, model="test/tiny-vl-GGUF")
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
        assert len(hub.requests) == asked
    finally:
        srv.stop()
    assert len(hub.seen("GET", f"/{SMOL}/resolve/")) == 1  # serving found it in the cache


def test_the_quantisation_tag_chooses_the_file(hub: StubHub, tmp_path: Path) -> None:
    env = hub_env(hub, tmp_path)
    srv = Server(["--model", f"{SMOL}:Q8_0", "--ctx-size", "512"], env=env)
    try:
        model = card(srv)
        assert model["id"] == "SmolLM2-135M-Instruct:Q8_0"
        assert model["toolserve"]["architecture"] == "qwen2vl"  # the Q8_0 file, which holds another model
        assert model["toolserve"]["path"] == str(snapshot(tmp_path, SMOL) / Q8)
    finally:
        srv.stop()
    assert not (snapshot(tmp_path, SMOL) / Q4).exists()
    line = error_line(cli("pull", f"{SMOL}:Q5_K_M", env=env))
    assert f"{SMOL} has no GGUF tagged Q5_K_M: it has Q4_K_M, Q8_0" in line


def test_split_files_are_fetched_and_loaded_together(hub: StubHub, tmp_path: Path, server: Server) -> None:
    srv = Server(["--model", "test/split-GGUF", "--ctx-size", "2048"], env=hub_env(hub, tmp_path))
    try:
        ts = card(srv)["toolserve"]
        names = [f"smol-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
        assert ts["path"] == str(snapshot(tmp_path, "test/split-GGUF") / names[0])
        assert ts["parts"] == 3 and ts["size_bytes"] == sum((snapshot(tmp_path, "test/split-GGUF") / n).stat().st_size for n in names)
        body = {"temperature": 0, "max_tokens": 24}
        split_answer = chat(srv, **body).json()["choices"][0]["message"]["content"]
    finally:
        srv.stop()
    whole_answer = chat(server, **body).json()["choices"][0]["message"]["content"]
    assert split_answer == whole_answer  # the same weights, all three parts of them


def test_a_vision_model_comes_with_its_projector(hub: StubHub, tmp_path: Path) -> None:
    from PIL import Image

    srv = Server(["--model", "test/tiny-vl-GGUF", "--ctx-size", "1024", "--threads", "1"], env=hub_env(hub, tmp_path))
    try:
        ts = card(srv)["toolserve"]
        assert ts["vision"] is True and ts["input_modalities"] == ["text", "image"]
        assert hub.seen("GET", "/test/tiny-vl-GGUF/resolve/main/mmproj-tiny-qwen2vl-f16.gguf")
        png = io.BytesIO()
        Image.new("RGB", (32, 32), (200, 30, 30)).save(png, format="PNG")
        uri = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
        parts = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "What is this?"}]
        r = chat(srv, messages=[{"role": "user", "content": parts}], max_tokens=4, temperature=0)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] > 8  # the image's tokens are in the prompt
    finally:
        srv.stop()


def test_a_download_cut_off_resumes_and_the_file_is_whole(hub: StubHub, tmp_path: Path) -> None:
    hub.cut["test/resume-GGUF/m-Q4_K_M.gguf"] = 25_000_000
    done = cli("pull", "test/resume-GGUF", env=hub_env(hub, tmp_path))
    assert done.returncode == 0, done.stderr
    # huggingface_hub 0.x leaves the retry to toolserve ("was interrupted ... resuming"); newer ones resume it themselves
    assert "test/resume-GGUF/m-Q4_K_M.gguf: 100% (98 of 98 MB" in done.stderr  # not a terminal: log lines per 10%
    gets = hub.seen("GET", "/test/resume-GGUF/resolve/")
    assert gets[0].headers.get("Range") is None
    assert any(g.headers.get("Range", "").startswith("bytes=") and not g.headers["Range"].startswith("bytes=0-") for g in gets[1:])
    assert sha256(snapshot(tmp_path, "test/resume-GGUF") / "m-Q4_K_M.gguf") == sha256(bundled_model())


def test_a_killed_pull_resumes_where_it_stopped(hub: StubHub, tmp_path: Path) -> None:
    env = hub_env(hub, tmp_path)
    hub.stall["test/killed-GGUF/m-Q4_K_M.gguf"] = 25_000_000
    proc = subprocess.Popen([*toolserve_command(), "pull", "test/killed-GGUF"], env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    blobs = tmp_path / "hf" / "hub" / "models--test--killed-GGUF" / "blobs"
    deadline = time.monotonic() + 300
    while not any(p.name.endswith(".incomplete") and p.stat().st_size > 0 for p in blobs.glob("*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the pull never wrote part of the file"
        time.sleep(0.2)
    time.sleep(0.5)  # the stand-in holds the rest back; what arrived is written
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = next(p for p in blobs.glob("*.incomplete")).stat().st_size
    hub.release()
    done = cli("pull", "test/killed-GGUF", env=env)
    assert done.returncode == 0, done.stderr
    last = hub.seen("GET", "/test/killed-GGUF/resolve/")[-1]
    assert last.headers.get("Range") == f"bytes={partial}-"
    assert sha256(snapshot(tmp_path, "test/killed-GGUF") / "m-Q4_K_M.gguf") == sha256(bundled_model())


def test_a_corrupted_download_is_refused_by_its_checksum(hub: StubHub, tmp_path: Path) -> None:
    env = hub_env(hub, tmp_path)
    hub.corrupt.add("test/corrupt-GGUF/m-Q4_K_M.gguf")
    try:
        line = error_line(cli("pull", "test/corrupt-GGUF", env=env))
        assert "test/corrupt-GGUF/m-Q4_K_M.gguf: the downloaded file does not match its checksum (sha256" in line
        assert "it was deleted and not used" in line
        cache = tmp_path / "hf" / "hub" / "models--test--corrupt-GGUF"
        assert not [p for p in cache.rglob("*") if p.is_file() or p.is_symlink()  if "blobs" in p.parts or "snapshots" in p.parts]
        # serving the reference refuses it the same way, and does not start
        assert "does not match its checksum" in error_line(cli("serve", "--model", "test/corrupt-GGUF", "--port", "0", env=env))
    finally:
        hub.corrupt.clear()
    fixed = cli("pull", "test/corrupt-GGUF", env=env)
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.parametrize(
    ("ref", "token", "needles"),
    [
        ("test/gated-GGUF", None, ["test/gated-GGUF is gated (401): accept its conditions at http://", "/test/gated-GGUF, then pass a token with HF_TOKEN=hf_... or --hf-token"]),
        ("test/gated-GGUF", "hf_not_granted", ["test/gated-GGUF is gated and the token sent has no access to it (403): ask for access at http://"]),
        ("test/private-GGUF", None, ["test/private-GGUF was not found on the Hugging Face Hub (401); if it is private or gated, pass a token"]),
        ("nobody/missing-GGUF", "hf_granted", ["nobody/missing-GGUF was not found on the Hugging Face Hub (404), or the token sent cannot read it"]),
        ("test/gated-GGUF", "hf_unknown", ["the Hugging Face Hub refused the token (401, invalid credentials) for test/gated-GGUF: check HF_TOKEN / --hf-token"]),
        ("test/safetensors-only", None, ["test/safetensors-only has no GGUF file (it holds README.md, config.json, model.safetensors)", "models?other=base_model:quantized:test/safetensors-only"]),
    ],
)
def test_refusals_say_what_to_do(hub: StubHub, tmp_path: Path, ref: str, token: str | None, needles: list[str]) -> None:
    line = error_line(cli("pull", ref, *(["--hf-token", token] if token else []), env=hub_env(hub, tmp_path)))
    for needle in needles:
        assert needle in line


@pytest.mark.parametrize("how", ["HF_TOKEN", "--hf-token"])
def test_a_granted_token_fetches_gated_and_private_repos(hub: StubHub, tmp_path: Path, how: str) -> None:
    for ref in ("test/gated-GGUF", "test/private-GGUF"):
        if how == "HF_TOKEN":
            done = cli("pull", ref, env=hub_env(hub, tmp_path, HF_TOKEN="hf_granted"))
        else:
            done = cli("pull", ref, "--hf-token", "hf_granted", env=hub_env(hub, tmp_path))
        assert done.returncode == 0, done.stderr
        assert "downloaded" in done.stdout


def test_offline_uses_the_cache_only(hub: StubHub, tmp_path: Path) -> None:
    env = hub_env(hub, tmp_path)
    asked = len(hub.requests)
    for flags, extra, why in ((["--offline"], {}, "--offline"), ([], {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1")):
        line = error_line(cli("pull", "test/tiny-vl-GGUF", *flags, env={**env, **extra}))
        assert f"test/tiny-vl-GGUF is not in the Hugging Face cache {tmp_path / 'hf' / 'hub'}; {why} allows no download" in line
        assert "run `toolserve pull test/tiny-vl-GGUF` where the Hub can be reached" in line
    assert len(hub.requests) == asked  # offline: not one request
    assert cli("pull", "test/tiny-vl-GGUF", env=env).returncode == 0
    before = len(hub.requests)
    srv = Server(["--model", "test/tiny-vl-GGUF", "--offline", "--ctx-size", "512", "--threads", "1"], env=env)
    try:
        assert card(srv)["toolserve"]["vision"] is True  # the projector came from the cache too
        assert chat(srv, max_tokens=2).status_code == 200
    finally:
        srv.stop()
    assert len(hub.requests) == before  # not one request to the Hub
    # a quantisation the cache does not hold is named as such
    line = error_line(cli("pull", "test/tiny-vl-GGUF:Q4_K_M", "--offline", env=env))
    assert "in the Hugging Face cache, test/tiny-vl-GGUF has no GGUF tagged Q4_K_M" in line


def test_an_unreachable_hub_falls_back_to_the_cache(hub: StubHub, tmp_path: Path) -> None:
    from tests.conftest import free_port

    env = hub_env(hub, tmp_path)
    assert cli("pull", "test/tiny-vl-GGUF", env=env).returncode == 0
    nowhere = hub_env(f"http://127.0.0.1:{free_port()}", tmp_path)
    done = cli("pull", "test/tiny-vl-GGUF", env=nowhere)
    assert done.returncode == 0, done.stderr
    assert "cannot reach the Hugging Face Hub" in done.stderr and "using test/tiny-vl-GGUF from the cache" in done.stderr
    line = error_line(cli("pull", SMOL, env=nowhere))
    assert "cannot reach the Hugging Face Hub at http://127.0.0.1:" in line and f"to fetch {SMOL}" in line and "not in the cache" in line


def test_a_terminal_gets_a_progress_bar(hub: StubHub, tmp_path: Path) -> None:
    """On a terminal huggingface_hub's bar shows the size, the rate and the time left."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    proc = subprocess.Popen([*toolserve_command(), "pull", "test/tiny-vl-GGUF"], env={**os.environ, **hub_env(hub, tmp_path)},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the command closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait() == 0, seen.decode(errors="replace")
    text = seen.decode(errors="replace")
    assert "100%|" in text and "B/s]" in text and "<00:00" in text  # done, a rate, the time left
    assert "% (" not in text  # no log lines as well
