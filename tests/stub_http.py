"""A real HTTP server for tests that stand in for an upstream (asyncio streams, on a thread of its own).

Subclasses answer one request per connection in `respond(method, path, body, writer)`; the
connection closes after it. `reply` builds a whole HTTP response.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from tests.conftest import free_port


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One HTTP/1.1 request from `reader`: its request line, its headers (names in lower case)
    and its body (by Content-Length)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in head[1:] if ":" in h)}
    return head[0], headers, await reader.readexactly(int(headers.get("content-length", 0)))


class StubHttp:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        assert ready.wait(10)

    @staticmethod
    def reply(status: str, body: bytes, kind: str = "application/json") -> bytes:
        head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        return head.encode() + body

    async def respond(self, method: str, path: str, body: Any, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line, _, raw = await read_request(reader)
            method, path, _ = line.split(" ")
            body = json.loads(raw) if raw else {}
            await self.respond(method, path, body, writer)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
