"""README's first request and its tool call, copied out of README.md as written (its first two
```python blocks, run one after the other as a reader pastes them), against a real server: both
answer. Only the address changes, to the test server's."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tests.conftest import Server

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text("utf-8"), flags=re.S | re.M)


def test_the_first_request_and_the_tool_call_answer(server: Server) -> None:
    first, tool = python_blocks()[:2]
    assert "http://127.0.0.1:8000/v1" in first and "chat.completions.create" in first
    assert "tool_choice" in tool and "get_weather" in tool
    scope: dict[str, object] = {}
    printed = []
    for block in (first, tool):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(block.replace("http://127.0.0.1:8000/v1", f"{server.url}/v1"), scope)
        printed.append(out.getvalue().strip())
    answer, call = printed
    assert answer, "the first request printed no answer"
    assert call.startswith("Function(") and "name='get_weather'" in call and "city" in call, call
