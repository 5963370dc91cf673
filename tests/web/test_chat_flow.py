"""Playing a conversation in the page: a required tool call as a card and its result typed by
hand, JSON output, reasoning in its own block, stop, regenerate, edit, the sidebar and its
exports, and an image for a vision model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.conftest import Server
from tests.web.conftest import ChatPage, engine_stats, open_chat

GREEDY = {"temperature": 0, "seed": 7, "max_tokens": 96}
RESULT = '{"temperature_c": 21, "sky": "sunny"}'


def test_required_tool_call_shows_a_card_and_a_typed_result_completes_the_round_trip(chat: ChatPage) -> None:
    chat.open()
    chat.settings(**GREEDY, **{"tools-on": True})
    chat.settings(**{"tool-choice": "required", "parallel": False})  # one call, then the answer ends
    chat.close_settings()
    chat.send("What is the weather in Paris?")
    answer = chat.wait_answers(1)
    card = answer.locator(".tool-card")
    assert card.count() == 1
    assert card.locator(".tool-name").inner_text() == "get_weather"
    shown = card.locator(".tool-args").inner_text()
    args = json.loads(shown)
    assert isinstance(args.get("city"), str) and shown == json.dumps(args, indent=2)  # formatted JSON
    call_id = card.locator(".tool-id").inner_text()
    assert call_id.startswith("call_")
    assert chat.stat(answer, "finish") == "tool_calls"
    sent = chat.requests[-1]
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    answer.locator("button.raw-toggle").click()  # what the model wrote, markup and all
    assert "<tool_call>" in answer.locator(".raw-text .token").all_inner_texts()
    assert json.loads(answer.locator(".raw-parsed").inner_text())["tool_calls"][0]["id"] == call_id
    chat.shoot("card")

    # the result, typed into the card; the model then answers in words
    chat.settings(**{"tool-choice": "none"})
    chat.close_settings()
    card.locator("textarea.tool-result-input").fill(RESULT)
    card.locator("button.send-result").click()
    second = chat.wait_answers(2)
    sent = chat.requests[-1]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == call_id
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call_id, "content": RESULT}
    assert second.locator(".content").inner_text().strip()
    assert not second.locator(".error").count()
    assert chat.stat(second, "finish") in ("stop", "length")
    assert chat.page.locator(".msg.assistant").first.locator("pre.tool-result").inner_text() == RESULT
    chat.shoot("round-trip")


def test_json_output_follows_the_schema(chat: ChatPage) -> None:
    chat.open()
    chat.settings(**{**GREEDY, "max_tokens": 400, "json-mode": "json_schema"})  # room for the whole object
    chat.close_settings()
    chat.send("Is the sky blue?")
    answer = chat.wait_answers(1)
    sent = chat.requests[-1]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["required"] == ["answer"]
    assert chat.stat(answer, "finish") == "stop"
    assert answer.locator(".content .codeblock .lang").inner_text() == "json"  # shown as formatted JSON
    shown = answer.locator(".content code").inner_text()
    assert isinstance(json.loads(shown)["answer"], str) and shown.startswith('{\n  "answer": ')


def test_reasoning_streams_into_its_own_collapsed_block(chat: ChatPage) -> None:
    chat.open()
    chat.settings(temperature=0, seed=7, max_tokens=40, extra='{"chat_template_kwargs": {"enable_thinking": true}}')
    chat.close_settings()
    chat.page.evaluate("""() => {
        window.lengths = [];
        new MutationObserver(() => {
            const r = document.querySelector('.msg.assistant .reasoning-text');
            if (r && r.textContent.length !== window.lengths[window.lengths.length - 1]) window.lengths.push(r.textContent.length);
        }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
    }""")
    chat.send("Is 17 a prime number?")
    answer = chat.wait_answers(1)
    assert chat.requests[-1]["chat_template_kwargs"] == {"enable_thinking": True}
    details = answer.locator("details.reasoning")
    assert details.count() == 1 and details.evaluate("d => d.open") is False  # collapsed by default
    reasoning = details.locator(".reasoning-text").text_content() or ""
    assert reasoning.strip()
    lengths: list[int] = chat.page.evaluate("window.lengths")
    assert len(lengths) >= 3 and lengths == sorted(lengths), lengths  # it grew while it streamed
    assert reasoning.strip()[:20] not in answer.locator(".content").inner_text()  # never in the answer
    answer.locator("button.raw-toggle").click()
    parsed = json.loads(answer.locator(".raw-parsed").inner_text())
    assert parsed["reasoning_content"] == reasoning
    details.locator("summary").click()
    assert details.evaluate("d => d.open") is True
    chat.shoot("reasoning")


def wait_engine_idle(server: Server) -> dict[str, Any]:
    # a guard against hanging, not a speed check: the whole 1500 tokens would end it too
    for _ in range(1200):
        stats = engine_stats(server)
        if stats["active"] == 0 and not stats["busy"]:
            return stats
        time.sleep(0.05)
    raise AssertionError(f"the engine is still generating: {stats}")


@pytest.mark.parametrize("how", ["button", "escape"])
def test_stop_cancels_the_generation(chat: ChatPage, how: str) -> None:
    chat.open()
    # end-of-text tokens banned: only a cancel ends this answer before 1500 tokens
    chat.settings(temperature=0, seed=7, max_tokens=1500, extra='{"logit_bias": {"2": -100, "0": -100}}')
    chat.close_settings()
    before = wait_engine_idle(chat.server)["generated_tokens"]
    chat.send("Write a very long story about the sea.")
    chat.page.wait_for_function("() => (document.querySelector('.msg.assistant .content')?.textContent || '').length > 40")
    assert chat.page.is_visible("#stop")
    if how == "button":
        chat.page.click("#stop")
    else:
        chat.page.keyboard.press("Escape")
    answer = chat.wait_answers(1)
    assert answer.locator(".stopped").count() == 1 and chat.stat(answer, "finish") == "stopped"
    after = wait_engine_idle(chat.server)
    assert after["active"] == 0
    assert 0 < after["generated_tokens"] - before < 1500  # the server stopped, not only the page
    assert chat.page.is_visible("#send") and chat.page.is_hidden("#stop")


def test_regenerate_edit_sidebar_and_exports(chat: ChatPage) -> None:
    page = chat.page
    chat.open()
    chat.settings(**GREEDY)
    chat.close_settings()
    chat.send("Name a fruit.")
    first = chat.wait_answers(1).locator(".content").inner_text()
    page.click(".msg.assistant button.regenerate")
    again = chat.wait_answers(1).locator(".content").inner_text()
    assert chat.requests[-1] == chat.requests[-2] and again == first  # greedy, one sequence: the same words

    page.click(".msg.user button.edit")
    page.fill(".msg.user textarea.edit-input", "Name a vegetable.")
    page.click(".msg.user button.edit-send")
    chat.wait_answers(1)
    assert chat.requests[-1]["messages"] == [{"role": "user", "content": "Name a vegetable."}]
    assert page.locator(".msg.user .user-text").all_inner_texts() == ["Name a vegetable."]
    assert page.locator("#conversations li .open-chat").all_inner_texts() == ["Name a vegetable."]

    page.click("#export-json")
    exported = json.loads(page.input_value("#export-text"))
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]
    assert not [k for m in exported["messages"] for k in m if k.startswith("_")]
    page.click("#export-close")
    page.click("#export-curl")
    curl = page.input_value("#export-text")
    page.click("#export-close")
    assert curl.startswith(f"curl -N {chat.server.url}/v1/chat/completions")
    body = json.loads(curl.split("<<'JSON'\n", 1)[1].rsplit("\nJSON\n", 1)[0])
    assert body == chat.requests[-1]
    with httpx.stream("POST", f"{chat.server.url}/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200 and "data: [DONE]" in list(r.iter_lines())

    page.reload()  # kept in the browser
    chat.open()
    assert page.locator(".msg.user .user-text").all_inner_texts() == ["Name a vegetable."]
    page.click("#new-chat")
    chat.send("Hi")
    chat.wait_answers(1)
    assert page.locator("#conversations li .open-chat").all_inner_texts() == ["Hi", "Name a vegetable."]
    page.locator("#conversations li", has_text="Name a vegetable.").locator(".delete-chat").click()
    assert page.locator("#conversations li .open-chat").all_inner_texts() == ["Hi"]
    page.reload()
    chat.open()
    assert page.locator("#conversations li .open-chat").all_inner_texts() == ["Hi"]


@pytest.fixture(scope="module")
def vlm() -> Iterator[Server]:
    from tests.vision.make_tiny_vlm import build

    model, mmproj = build()
    srv = Server(["--model", str(model), "--mmproj", str(mmproj), "--ctx-size", "2048", "--parallel", "1"])
    yield srv
    srv.stop()


def test_image_attachment_for_a_vision_model(browser: Any, vlm: Server, screenshots: Path, tmp_path: Path) -> None:
    png = tmp_path / "red.png"
    Image.new("RGB", (84, 84), (200, 30, 30)).save(png)
    with open_chat(browser, vlm, screenshots, "image") as chat:
        chat.open()
        assert chat.page.is_visible("#attach-label")
        chat.page.set_input_files("#attach", str(png))
        chat.page.wait_for_selector("#attachments img")
        chat.settings(temperature=0, seed=7, max_tokens=8)
        chat.close_settings()
        chat.send("Describe the picture.")
        answer = chat.wait_answers(1)
        content = chat.requests[-1]["messages"][0]["content"]
        assert content[0] == {"type": "text", "text": "Describe the picture."}
        assert content[1]["type"] == "image_url" and content[1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert not answer.locator(".error").count()
        assert int(chat.stat(answer, "prompt")) >= 9  # 84x84 pixels: 9 image tokens besides the words
        assert chat.page.locator(".msg.user .thumbs img").count() == 1
        assert chat.page.locator("#attachments img").count() == 0
