"""The second bundled family: Gemma 3 270M, whose GGUF has no chat template of its own."""

from __future__ import annotations

import httpx
from openai import OpenAI


def test_gemma_uses_the_bundled_template_and_streams_like_non_stream(gemma_server) -> None:  # type: ignore[no-untyped-def]
    card = httpx.get(f"{gemma_server.url}/v1/models").json()["data"][0]
    assert card["toolserve"]["chat_template"] == "bundled:gemma3"
    assert card["toolserve"]["architecture"] == "gemma3"
    assert card["toolserve"]["tool_format"] == "gemma3_tool_code"  # picked from the architecture
    client = OpenAI(base_url=f"{gemma_server.url}/v1", api_key="x", max_retries=0)
    kw = {"model": card["id"], "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
          "max_tokens": 16, "temperature": 0.7, "seed": 9}
    full = client.chat.completions.create(**kw)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw) if c.choices)
    assert streamed == full.choices[0].message.content
    tokens = httpx.post(f"{gemma_server.url}/tokenize", json={"messages": kw["messages"]}).json()["tokens"]
    assert full.usage.prompt_tokens == len(tokens)
    text = httpx.post(f"{gemma_server.url}/detokenize", json={"tokens": tokens}).json()["prompt"]
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
