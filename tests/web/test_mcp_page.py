"""The chat page with an MCP server of --mcp-config turned on: the page sends Responses
requests naming it, the server runs the model's call on the stdio server, and the answer shows
the call and its result as a card; a second turn sends the call back as history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CTX_SIZE, Server
from tests.e2e.test_mcp import stdio_config
from tests.web.conftest import open_chat


@pytest.fixture(scope="module")
def mcp_web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = stdio_config(tmp_path_factory.mktemp("mcp-web"))
    srv = Server(["--ctx-size", str(CTX_SIZE), "--parallel", "1", "--mcp-config", str(config)])
    yield srv
    srv.stop()


def test_a_stdio_server_tool_runs_and_its_card_shows_call_and_result(
    browser: Any, mcp_web_server: Server, screenshots: Path, request: pytest.FixtureRequest
) -> None:
    with open_chat(browser, mcp_web_server, screenshots, request.node.name) as chat:
        sent: list[dict[str, Any]] = []
        chat.page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/responses") else None)
        chat.open()
        chat.page.click("#toggle-settings")
        toggle = chat.page.locator('input.mcp-toggle[data-label="local"]')
        toggle.wait_for()
        assert chat.page.locator("input.mcp-toggle").count() == 1  # the disabled entry is not offered
        toggle.set_checked(True)
        forced = {"tool_choice": {"type": "mcp", "server_label": "local", "name": "secret_word"}, "max_tool_calls": 1}
        chat.settings(temperature=0, max_tokens=48, extra=json.dumps(forced))
        chat.close_settings()
        chat.send("What is the secret word?")
        answer = chat.wait_answers(1)
        card = answer.locator(".mcp-card")
        assert card.count() == 1
        assert card.locator(".tool-name").inner_text() == "secret_word"
        assert "local" in card.locator(".tool-id").inner_text()
        assert card.locator(".tool-result").inner_text() == "pelican"
        assert not answer.locator(".error").count()
        body = sent[-1]
        assert {"type": "mcp", "server_label": "local", "require_approval": "never"} in body["tools"]
        assert body["stream"] is True and body["store"] is False
        chat.shoot("card")

        # the next turn carries the call and its result back, and no tool is forced any more
        chat.settings(extra="")
        chat.close_settings()
        chat.send("Thanks.")
        chat.wait_answers(2)
        history = sent[-1]["input"]
        call = next(i for i in history if i.get("type") == "mcp_call")
        assert (call["name"], call["server_label"], call["output"]) == ("secret_word", "local", "pelican")
        first = chat.page.locator(".msg.assistant").first
        assert first.locator(".mcp-card .tool-result").inner_text() == "pelican"  # still shown after re-render
