"""The chat page in a real browser: Debian's Chromium driven by Playwright for Python.

Playwright's wheel carries its own driver, so nothing is downloaded at test time: the browser
is the system's `chromium` (launched by path; `playwright install` is never run). When it is
missing and the tests run as root on Debian, the session installs it with apt-get once, as
tests/e2e/test_agents.py installs its agents from npm; otherwise the tests fail saying how to
get it. Screenshots go to $TOOLSERVE_SCREENSHOTS, or a folder under pytest's tmp dir."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import CTX_SIZE, Server

# the bundled ChatML, plus a reasoning block the request opens with
# chat_template_kwargs {"enable_thinking": true}: how the tests get reasoning out of SmolLM2
THINKING_TEMPLATE = """{%- for message in messages -%}
<|im_start|>{{ message['role'] }}
{{ message['content'] or "" }}<|im_end|>
{{ "" }}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking %}<think>
{% endif %}
{%- endif -%}
"""

HANG_GUARD_MS = 180_000  # the longest any wait may take before the test fails: a hang guard, not a speed check


def chromium_path() -> str:
    """The system Chromium; installed with apt-get when missing and we may (root on Debian)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-q", "chromium"]):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}", pytrace=False)
        found = shutil.which("chromium")
    if not found:
        pytest.fail(
            "The browser tests need Debian's Chromium: run `apt-get install chromium` (as root), "
            "or put a `chromium` binary on PATH. Playwright's own browser download is not used.",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: install the test extra, `pip install -e '.[test]'`", pytrace=False)
    path = chromium_path()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path)
        yield b
        b.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("TOOLSERVE_SCREENSHOTS")
    folder = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One sequence (--parallel 1): greedy answers repeat exactly, so each test sees the same words."""
    template = tmp_path_factory.mktemp("web") / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    srv = Server(["--ctx-size", str(CTX_SIZE), "--parallel", "1", "--chat-template", str(template), "--tool-format", "hermes"])
    yield srv
    srv.stop()


def engine_stats(server: Server) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", timeout=60).json()["toolserve"]  # type: ignore[no-any-return]


class ChatPage:
    """The page of one test, with the chat requests it sent and the errors it logged."""

    def __init__(self, page: Any, server: Server, shoot: Callable[[str], Path]):
        self.page, self.server, self.shoot = page, server, shoot
        self.errors: list[str] = []
        self.requests: list[dict[str, Any]] = []
        page.set_default_timeout(HANG_GUARD_MS)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", self._record)

    def _record(self, req: Any) -> None:
        if req.url.endswith("/v1/chat/completions") and req.method == "POST":
            self.requests.append(req.post_data_json)

    def open(self) -> ChatPage:
        self.page.goto(self.server.url + "/")
        self.page.wait_for_function("() => document.querySelector('#model').options.length > 0")
        return self

    def settings(self, **fields: Any) -> None:
        """Set fields of the settings panel by element id (without its 's-' prefix)."""
        if not self.page.is_visible("#settings"):
            self.page.click("#toggle-settings")
        for name, value in fields.items():
            box = self.page.locator(f"#s-{name}")
            if isinstance(value, bool):
                box.set_checked(value)
            elif box.evaluate("e => e.tagName") == "SELECT":
                box.select_option(value)
            else:
                box.fill(str(value))

    def close_settings(self) -> None:
        if self.page.is_visible("#settings"):
            self.page.click("#toggle-settings")

    def send(self, text: str) -> None:
        self.page.fill("#input", text)
        self.page.press("#input", "Enter")

    def wait_answers(self, count: int) -> Any:
        """The last answer, once `count` answers are there and none is streaming."""
        self.page.wait_for_function(
            "n => document.querySelectorAll('.msg.assistant').length === n && !document.body.classList.contains('busy')",
            arg=count,
        )
        return self.page.locator(".msg.assistant").last

    def stat(self, answer: Any, name: str) -> str:
        return str(answer.locator(f'[data-stat="{name}"] .stat-value').inner_text())


@pytest.fixture()
def chat(browser: Any, web_server: Server, screenshots: Path, request: pytest.FixtureRequest) -> Iterator[ChatPage]:
    with open_chat(browser, web_server, screenshots, request.node.name) as cp:
        yield cp


@contextlib.contextmanager
def open_chat(browser: Any, server: Server, screenshots: Path, name: str, **context: Any) -> Iterator[ChatPage]:
    """A fresh browser context (its own localStorage) on `server`; a screenshot at the end, and
    the page must have logged no error."""
    ctx = browser.new_context(viewport=context.pop("viewport", {"width": 1280, "height": 860}), **context)
    page = ctx.new_page()
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)

    def shoot(label: str) -> Path:
        path = screenshots / f"{safe}-{label}.png"
        page.screenshot(path=str(path))
        return path

    cp = ChatPage(page, server, shoot)
    try:
        yield cp
        shoot("end")
    finally:
        ctx.close()
    assert cp.errors == [], f"the page logged errors: {cp.errors}"
