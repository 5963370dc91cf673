"""Stored responses, for GET /v1/responses/{id} and `previous_response_id`.

In memory, bounded in count and age: a stored response is only useful while its
conversation goes on, the prompt cache that makes continuing it fast lives in memory too,
and nothing a user sent is written to disk. A restart forgets them (a client then gets a 404
and sends the whole conversation again, as Codex does anyway with `store: false`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from toolserve.errors import ToolserveError
from toolserve.types import Message


class ResponseNotFound(ToolserveError):
    status = 404
    type = "invalid_request_error"
    code = "response_not_found"


@dataclass(frozen=True)
class Stored:
    response: dict[str, Any]
    messages: tuple[Message, ...]  # the conversation through this response (instructions excluded)
    mcp_lists: dict[str, Any] = field(default_factory=dict)  # server label -> its mcp_list_tools item, for reuse
    approvals: dict[str, Any] = field(default_factory=dict)  # mcp_approval_request items not answered yet, by id
    at: float = field(default_factory=time.monotonic)


class ResponseStore:
    def __init__(self, max_count: int = 1000, max_age: float = 3600.0):
        self.max_count = max_count
        self.max_age = max_age
        self._items: OrderedDict[str, Stored] = OrderedDict()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._items:
            oldest = next(iter(self._items.values()))
            if len(self._items) <= self.max_count and now - oldest.at <= self.max_age:
                break
            self._items.popitem(last=False)

    def put(self, stored: Stored) -> None:
        self._items[stored.response["id"]] = stored
        self._expire()

    def get(self, response_id: str) -> Stored:
        self._expire()
        found = self._items.get(response_id)
        if found is None:
            raise ResponseNotFound(
                f"No response with id '{response_id}' is stored here (responses are kept for "
                f"{self.max_age / 60:.0f} minutes, at most {self.max_count}, and not across restarts).",
                param="response_id",
            )
        return found

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        del self._items[response_id]
