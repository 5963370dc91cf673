"""The chat page itself: it loads from this server alone without errors, streams an answer with
its numbers, renders Markdown safely, asks for the API key, works at phone width, and
`--no-web` turns it off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import CTX_SIZE, Server
from tests.web.conftest import ChatPage, open_chat

GREEDY = {"temperature": 0, "seed": 7, "max_tokens": 48}


def test_page_loads_from_this_server_without_errors(chat: ChatPage) -> None:
    origins: list[str] = []
    chat.page.on("request", lambda r: origins.append(r.url.split("/")[2]))
    chat.open()
    assert chat.page.title() == "toolserve"
    assert chat.page.locator("#model option").all_inner_texts() == ["SmolLM2-135M-Instruct.Q4_1"]
    assert chat.page.locator("#model optgroup").evaluate_all("gs => gs.map(g => g.label)") == ["Bundled"]  # where it came from
    info = chat.page.inner_text("#model-info")
    assert "tools: hermes" in info and "Q4_1 · 98 MB" in info
    assert "temperature 0.2 (model card)" in info  # the defaults a request gets
    assert "temperature 0.2: model card (HuggingFaceTB/SmolLM2-135M-Instruct)" in chat.page.get_attribute("#model-info", "title")
    assert chat.page.get_attribute("#s-temperature", "placeholder") == "model: 0.2"
    assert chat.page.is_hidden("#attach-label")  # SmolLM2 reads no images
    assert set(origins) == {chat.server.url.removeprefix("http://")}  # no CDN, nothing from elsewhere
    chat.shoot("loaded")


def test_page_headers_and_assets(web_server: Server) -> None:
    page = httpx.get(web_server.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css"), ("icon.svg", "image/svg+xml")):
        r = httpx.get(f"{web_server.url}/web/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    missing = httpx.get(f"{web_server.url}/web/../cli.py")
    assert missing.status_code == 404
    assert httpx.get(f"{web_server.url}/web/nope.js").json()["error"]["code"] == "not_found"
    assert f"toolserve:   chat page      {web_server.url}/" in web_server.stderr_text().splitlines()


def test_a_message_streams_an_answer_with_its_numbers(chat: ChatPage) -> None:
    chat.open()
    chat.settings(**GREEDY)
    chat.close_settings()
    # every text the answer showed while it streamed, in order
    chat.page.evaluate("""() => {
        window.seen = [];
        new MutationObserver(() => {
            const c = document.querySelector('.msg.assistant:last-of-type .content');
            const t = c ? c.textContent : '';
            if (t && t !== '…' && t !== window.seen[window.seen.length - 1]) window.seen.push(t);
        }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
    }""")
    chat.send("Name three colours.")
    answer = chat.wait_answers(1)
    seen: list[str] = chat.page.evaluate("window.seen")
    final = answer.locator(".content").text_content()
    assert final and final.strip()
    assert len(seen) >= 3 and seen[-1] == final, seen  # shown in steps as tokens came, not all at once
    sent = chat.requests[-1]
    assert sent["stream"] is True and sent["temperature"] == 0 and sent["seed"] == 7 and sent["max_tokens"] == 48
    assert sent["messages"] == [{"role": "user", "content": "Name three colours."}]
    assert sent["toolserve"] == {"raw": True} and sent["stream_options"] == {"include_usage": True}
    assert chat.stat(answer, "finish") in ("stop", "length")
    assert chat.stat(answer, "format") == "hermes"
    assert int(chat.stat(answer, "prompt")) > 5 and int(chat.stat(answer, "completion")) > 3
    assert int(chat.stat(answer, "cached")) >= 0
    assert chat.stat(answer, "ttft").endswith(" ms") and chat.stat(answer, "tps").endswith(" tok/s")
    chat.shoot("answer")


def test_raw_view_shows_the_generated_text(chat: ChatPage) -> None:
    chat.open()
    chat.settings(**GREEDY)
    chat.close_settings()
    chat.send("Say hello to Ann.")
    answer = chat.wait_answers(1)
    answer.locator("button.raw-toggle").click()
    raw = answer.locator(".raw-text").inner_text()
    parsed = chat.page.evaluate("JSON.parse(document.querySelector('.raw-parsed').textContent)")
    if chat.stat(answer, "finish") == "stop":  # the end-of-turn token the model wrote, shown as a token
        assert raw == parsed["content"] + "<|im_end|>"
        assert answer.locator(".raw-text .token").all_inner_texts()[-1] == "<|im_end|>"
    else:
        assert raw == parsed["content"]
    assert parsed["content"] and parsed["content"].strip() in answer.locator(".content").inner_text()
    chat.shoot("raw")


def test_markdown_is_rendered_and_safe(chat: ChatPage) -> None:
    chat.open()
    html = chat.page.evaluate("""async () => {
        const md = await import('/web/markdown.js');
        const box = document.createElement('div');
        box.append(md.render([
            '# Title', '', 'Some **bold**, *italic*, `code` and [a link](https://example.org).',
            '', '- one', '- two', '', '```python', 'print("<b>hi</b>")', '```', '',
            '<img src=x onerror="window.pwned=1">', '[bad](javascript:alert(1))',
            '', '| a | b |', '|---|--:|', '| 1 | 2 |', '', '```js', 'still streaming',
        ].join('\\n')));
        return box.innerHTML;
    }""")
    assert "<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<em>italic</em>" in html
    assert "<code>code</code>" in html and 'href="https://example.org/"' in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert '<code class="language-python">print("&lt;b&gt;hi&lt;/b&gt;")</code>' in html
    assert "<img" not in html and "&lt;img src=x" in html  # model output is text, never markup
    assert "javascript:" not in html
    assert "<table>" in html and 'class="align-right"' in html
    assert '<code class="language-js">still streaming</code>' in html  # an open fence is code so far
    assert chat.page.evaluate("window.pwned") is None


def test_phone_width(browser: Any, web_server: Server, screenshots: Path) -> None:
    phone = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
    with open_chat(browser, web_server, screenshots, "phone", **phone) as chat:
        chat.open()
        page = chat.page
        assert page.is_hidden("#sidebar") and page.is_visible("#toggle-sidebar")
        chat.settings(**GREEDY)
        assert page.locator("#settings").bounding_box()["width"] <= 390
        page.click("#settings .close-drawer")
        chat.send("Name a colour.")
        chat.wait_answers(1)
        page.click("#toggle-sidebar")
        assert page.is_visible("#conversations li")
        chat.shoot("sidebar")
        page.click("#sidebar .close-drawer")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the screen


@pytest.fixture(scope="module")
def keyed() -> Iterator[Server]:
    srv = Server(["--ctx-size", str(CTX_SIZE), "--parallel", "1", "--api-key", "sesame"])
    yield srv
    srv.stop()


def test_asks_for_the_api_key_when_the_server_wants_one(browser: Any, keyed: Server, screenshots: Path) -> None:
    with open_chat(browser, keyed, screenshots, "api_key") as chat:
        chat.page.goto(keyed.url + "/")
        chat.page.wait_for_selector("#key-dialog[open]")
        chat.shoot("asked")
        chat.page.fill("#key-input", "sesame")
        chat.page.click("#key-form button[type=submit]")
        chat.page.wait_for_function("() => document.querySelector('#model').options.length > 0")
        chat.settings(**GREEDY)
        chat.close_settings()
        chat.send("Hi")
        answer = chat.wait_answers(1)
        assert not answer.locator(".error").count()
        assert chat.stat(answer, "finish") in ("stop", "length")
        # the first /v1/models had no key: the browser logged its 401, which is the point here
        chat.errors[:] = [e for e in chat.errors if "401" not in e]


def test_no_web_turns_the_page_off() -> None:
    srv = Server(["--ctx-size", "512", "--parallel", "1", "--no-web"])
    try:
        r = httpx.get(srv.url + "/")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert httpx.get(srv.url + "/web/app.js").status_code == 404
        assert httpx.get(srv.url + "/v1/models").status_code == 200
    finally:
        srv.stop()
    assert "chat page" not in srv.stderr_text()


def test_the_picker_groups_models_by_where_they_came_from(browser: Any, screenshots: Path, tmp_path: Path) -> None:
    """A config serving an Ollama model, an LM Studio model and the bundled one: the picker lists
    them under their sources, as `toolserve models` does, with each one's details."""
    from tests.e2e.test_model_stores import LMS_FILE, LMS_REPO, ollama_store, place
    from toolserve.models.files import bundled_model

    ollama_store(tmp_path / "ollama", "smol", "latest", {"model": bundled_model()})
    place(bundled_model(), tmp_path / "home" / ".lmstudio" / "models" / LMS_REPO / LMS_FILE)
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - model: bundled\n  - model: ollama:smol\n  - model: lmstudio:{LMS_REPO}\n")
    env = {"OLLAMA_MODELS": str(tmp_path / "ollama"), "HOME": str(tmp_path / "home"), "TOOLSERVE_CACHE_DIR": str(tmp_path / "cache")}
    srv = Server(["--config", str(config), "--ctx-size", "512", "--parallel", "1"], env=env)
    try:
        with open_chat(browser, srv, screenshots, "picker_sources") as chat:
            chat.open()
            groups = chat.page.locator("#model optgroup").evaluate_all("gs => gs.map(g => [g.label, [...g.children].map(o => o.value)])")
            assert groups == [["Bundled", ["SmolLM2-135M-Instruct.Q4_1"]], ["Ollama", ["smol"]], ["LM Studio", ["SmolLM2-135M-Instruct"]]]
            chat.page.select_option("#model", "smol")
            assert "Q4_1 · 98 MB" in chat.page.inner_text("#model-info")  # read from the file, before it is loaded
            assert chat.page.get_attribute("#model option[value=smol]", "title") == "ollama:smol:latest"
            assert chat.page.is_hidden("#attach-label")  # a text model, known before it is loaded
            chat.shoot("ollama")
    finally:
        srv.stop()
