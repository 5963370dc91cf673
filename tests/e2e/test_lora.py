"""LoRA adapters on a real server: --lora on the model's id, --lora-model ids on shared base
weights, models.yaml, adapter-aware prompt reuse, and adapters refused at start.

The adapters are written in the test setup (tests/lora.py): random non-zero A and B matrices
for the bundled model's attention, so the greedy output provably changes under them."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.conftest import CTX_SIZE, Server, toolserve_command
from tests.lora import make_bad_lora, make_lora
from toolserve.models.files import bundled_model

POEM = [{"role": "user", "content": "Write a poem about the sea"}]
# a prompt of several 64-token chunks, so that a second request can reuse its prefix; its own
# system turn, so that no turn of it was read before (POEM's default system turn is reused)
LONG = [{"role": "system", "content": "You know rivers."},
        {"role": "user", "content": "Here are some facts about rivers. " * 30 + "Which river is the longest?"}]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("lora")
    base = bundled_model()
    return {"one": make_lora(base, d / "one.gguf", 1), "two": make_lora(base, d / "two.gguf", 2)}


@pytest.fixture(scope="module")
def multi(adapters: dict[str, Path]) -> Iterator[Server]:
    """The base model's own id plus three adapter ids on its weights: one, two and one at scale 0."""
    srv = Server([
        "--ctx-size", str(CTX_SIZE), "--parallel", "3",
        "--lora-model", f"one={adapters['one']}",
        "--lora-model", f"two={adapters['two']}:1.0",
        "--lora-model", f"zero={adapters['one']}:0",
    ])
    yield srv
    srv.stop()


def greedy(client: OpenAI, model: str, messages: list[dict[str, str]] = POEM, n: int = 24) -> tuple[str, int]:
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=n, temperature=0)  # type: ignore[arg-type]
    details = r.usage.prompt_tokens_details if r.usage else None
    return r.choices[0].message.content or "", (details.cached_tokens or 0) if details else 0


@pytest.fixture(scope="module")
def oai(multi: Server) -> OpenAI:
    return OpenAI(base_url=f"{multi.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def base_id(multi: Server) -> str:
    return str(httpx.get(f"{multi.url}/v1/models").json()["data"][0]["id"])


def test_models_lists_each_adapter_id_with_its_adapter_and_base(multi: Server, adapters: dict[str, Path], base_id: str) -> None:
    data = httpx.get(f"{multi.url}/v1/models").json()["data"]
    cards = {m["id"]: m["toolserve"] for m in data}
    assert list(cards) == [base_id, "one", "two", "zero"]
    assert cards[base_id]["adapters"] == [] and "base" not in cards[base_id]
    assert cards["one"]["adapters"] == [{"path": str(adapters["one"]), "scale": 1.0}]
    assert cards["zero"]["adapters"] == [{"path": str(adapters["one"]), "scale": 0.0}]
    assert {cards[i]["base"] for i in ("one", "two", "zero")} == {base_id}
    assert all(c["state"] == "loaded" for c in cards.values())


def test_adapters_change_the_output_and_scale_zero_is_the_base(oai: OpenAI, base_id: str) -> None:
    base, one, two, zero = (greedy(oai, m)[0] for m in (base_id, "one", "two", "zero"))
    assert one != base and two != base and one != two
    assert zero == base


def test_responses_name_the_adapter_id(oai: OpenAI) -> None:
    r = oai.chat.completions.create(model="two", messages=POEM, max_tokens=4, temperature=0)  # type: ignore[arg-type]
    assert r.model == "two"


def test_adapter_ids_side_by_side_answer_as_each_alone(multi: Server, oai: OpenAI, base_id: str) -> None:
    """Requests under different adapters run at once and never share a decode batch (llama.cpp
    applies adapters to the whole context), so with one request per adapter set each batch holds
    that request alone and the answer is bit-identical to a lone run. Two requests under the same
    adapter would share batches, and llama.cpp is not batch-invariant: that is not asserted."""
    ids = [base_id, "one", "two"]
    alone = {m: greedy(oai, m, n=32)[0] for m in ids}

    async def together() -> list[str]:
        client = AsyncOpenAI(base_url=f"{multi.url}/v1", api_key="unused", max_retries=0, timeout=120)
        rs = await asyncio.gather(*(
            client.chat.completions.create(model=m, messages=POEM, max_tokens=32, temperature=0)  # type: ignore[arg-type]
            for m in ids
        ))
        return [r.choices[0].message.content or "" for r in rs]

    for _ in range(2):
        assert asyncio.run(together()) == [alone[m] for m in ids]


def test_prompt_reuse_never_crosses_adapters(oai: OpenAI, base_id: str) -> None:
    first_base, _ = greedy(oai, base_id, LONG)
    first_one, cached = greedy(oai, "one", LONG)
    assert cached == 0  # the base's KV of the same prompt is not reused under the adapter
    again_one, cached_again = greedy(oai, "one", LONG)
    assert cached_again > 0 and again_one == first_one  # its own KV is, and answers the same
    again_base, cached_base = greedy(oai, base_id, LONG)
    assert cached_base > 0 and again_base == first_base


def test_unloading_an_adapter_id_names_its_base(multi: Server, base_id: str) -> None:
    r = httpx.post(f"{multi.url}/v1/models/one/unload")
    assert r.status_code == 400
    assert f"LoRA adapter on '{base_id}'" in r.json()["error"]["message"]


def test_lora_flag_applies_to_the_model_id(adapters: dict[str, Path], oai: OpenAI) -> None:
    srv = Server(["--ctx-size", str(CTX_SIZE), "--lora", str(adapters["one"])])
    try:
        ids = [m["id"] for m in httpx.get(f"{srv.url}/v1/models").json()["data"]]
        assert len(ids) == 1 and ids[0].endswith("+one")
        own = OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        assert greedy(own, ids[0])[0] == greedy(oai, "one")[0]
    finally:
        srv.stop()


def test_models_yaml_adapters_load_with_their_base(adapters: dict[str, Path], tmp_path: Path) -> None:
    cfg = tmp_path / "models.yaml"
    cfg.write_text(
        "models:\n"
        "  - id: small\n"
        f"    ctx_size: {CTX_SIZE}\n"
        f"    lora_models:\n      tuned: {{path: {adapters['two']}, scale: 1.0}}\n"
    )
    srv = Server(["--config", str(cfg)])
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            states = {m["id"]: m["toolserve"]["state"] for m in http.get("/v1/models").json()["data"]}
            assert states == {"small": "unloaded", "tuned": "unloaded"}
            body = {"model": "tuned", "messages": POEM, "max_tokens": 24, "temperature": 0}
            tuned = http.post("/v1/chat/completions", json=body).json()
            assert tuned["model"] == "tuned"
            states = {m["id"]: m["toolserve"]["state"] for m in http.get("/v1/models").json()["data"]}
            assert states == {"small": "loaded", "tuned": "loaded"}  # one load: the base, shared
            base = http.post("/v1/chat/completions", json={**body, "model": "small"}).json()
            assert base["choices"][0]["message"]["content"] != tuned["choices"][0]["message"]["content"]
            assert http.post("/v1/models/small/unload").status_code == 200
            states = {m["id"]: m["toolserve"]["state"] for m in http.get("/v1/models").json()["data"]}
            assert states == {"small": "unloaded", "tuned": "unloaded"}
            again = http.post("/v1/chat/completions", json=body).json()  # loads the base again
            assert again["choices"][0]["message"]["content"] == tuned["choices"][0]["message"]["content"]
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "no such file"),
        ("text", "is not a GGUF file"),
        ("not-lora", "is not a LoRA adapter (a GGUF of type model)"),
        ("wrong-arch", "was made for a qwen2 model; this model is llama"),
        ("wrong-shape", "has incorrect shape (hint: maybe wrong base model?)"),
    ],
)
def test_bad_adapters_stop_the_start_naming_file_and_reason(tmp_path: Path, kind: str, reason: str) -> None:
    path = tmp_path / f"{kind}.gguf"
    if kind == "text":
        path.write_text("not a model\n")
    elif kind != "missing":
        make_bad_lora(bundled_model(), path, kind)
    for flag in (["--lora", str(path)], ["--lora-model", f"x={path}"]):
        proc = subprocess.run(
            [*toolserve_command(), "serve", "--port", "0", *flag], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 1, proc.stderr
        assert f"LoRA adapter {path}" in proc.stderr and reason in proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--lora", ""], "expected PATH[:SCALE]"),
        (["--lora-model", "nameless.gguf"], "expected NAME=PATH[:SCALE]"),
    ],
)
def test_malformed_lora_flags(flag: list[str], message: str) -> None:
    proc = subprocess.run([*toolserve_command(), "serve", "--port", "0", *flag], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr


def test_an_adapter_id_may_not_repeat_the_model_id(adapters: dict[str, Path]) -> None:
    proc = subprocess.run(
        [*toolserve_command(), "serve", "--port", "0", "--model-alias", "m", "--lora-model", f"m={adapters['one']}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1 and "the model id 'm' is served already" in proc.stderr
