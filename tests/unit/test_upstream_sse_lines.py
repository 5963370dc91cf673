"""An upstream's SSE stream cut into lines (upstream/client.sse_lines): at CRLF, LF or CR, as the
SSE spec says, and nowhere else, whatever the split of the bytes into chunks. httpx's
`aiter_lines`, which the client used before, cuts where `str.splitlines` does: a U+2028, U+2029
or U+0085 that a model wrote (JSON leaves them unescaped, and vLLM's events carry them as
they are) cut an event's JSON in two, and the stream failed as "not JSON"."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.stub_http import read_request
from toolserve.config import UpstreamConfig
from toolserve.errors import UpstreamError
from toolserve.upstream import client as client_mod
from toolserve.upstream.client import UpstreamClient, sse_lines


def lines_of(chunks: list[bytes]) -> list[str]:
    async def source() -> AsyncIterator[bytes]:
        for c in chunks:
            yield c

    async def read() -> list[str]:
        return [line async for line in sse_lines(source())]

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"data: a\n\n"], ["data: a", ""]),
        ([b"data: a\r\n\r\n"], ["data: a", ""]),
        ([b"data: a\r\rdata: b\r"], ["data: a", "", "data: b"]),
        ([b"data: a\r", b"\n", b"data: b\n"], ["data: a", "data: b"]),  # CRLF split over two chunks: one end
        ([b"data: a\r", b"\n\n"], ["data: a", ""]),  # CRLF then LF: two ends
        ([b"data: a\r", b"", b"\n", b"data: b\n"], ["data: a", "data: b"]),  # an empty chunk inside a CRLF
        ([b"data: a\n", b"\n"], ["data: a", ""]),
        ([b"da", b"ta: ", b"a\nda", b"ta: b"], ["data: a", "data: b"]),  # the last line without an end
        (["data: \u2028\u2029\u0085\x0b\x0c\x1c\n".encode()], ["data: \u2028\u2029\u0085\x0b\x0c\x1c"]),
        (["data: é€😀\n".encode()[:8], "data: é€😀\n".encode()[8:]], ["data: é€😀"]),  # a character cut between chunks
        ([b"data: \xff\n"], ["data: \ufffd"]),  # not UTF-8: replaced, as httpx did
        ([b"", b"data: a\n", b""], ["data: a"]),
    ],
)
def test_lines(chunks: list[bytes], lines: list[str]) -> None:
    assert lines_of(chunks) == lines


def test_a_line_without_end_past_the_limit_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_mod, "MAX_SSE_LINE", 10)
    assert lines_of([b"data: abc\n", b"data: ", b"abcd\n"]) == ["data: abc", "data: abcd"]  # 10 bytes: held
    with pytest.raises(UpstreamError, match="longer than"):
        lines_of([b"data: abc\n", b"data: ", b"abcde", b"f\n"])


ENDS = st.sampled_from(["\n", "\r\n", "\r"])
TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)


@given(st.lists(st.tuples(TEXT, ENDS), max_size=8), st.data())
def test_any_split_gives_the_same_lines(lines: list[tuple[str, str]], data: st.DataObject) -> None:
    # a CR end, then an empty line ended by LF, is a CRLF: one end, written so on purpose in test_lines
    assume(not any(e == "\r" and t == "" and f[0] == "\n" for (_, e), (t, f) in itertools.pairwise(lines)))
    whole = "".join(text + end for text, end in lines).encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=6)))
    chunks = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
    assert lines_of(chunks) == [text for text, _ in lines]


def test_a_line_separator_in_an_answer_reaches_the_client() -> None:
    """A stream from a real HTTP server whose content holds U+2028 and U+0085 unescaped, as
    vLLM sends them: every event arrives whole."""
    words = ["one\u2028two", "three\u0085four", "five\u2029"]

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        body = b"".join(b"data: " + json.dumps({"choices": [{"delta": {"content": t}}]}, ensure_ascii=False).encode() + b"\n\n"
                        for t in words) + b"data: [DONE]\n\n"
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body)
        await w.drain()
        w.close()

    async def run() -> list[str]:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = UpstreamClient(UpstreamConfig(url=f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"))
        try:
            resp = await client.open("/v1/chat/completions", {"stream": True})
            return [obj["choices"][0]["delta"]["content"] async for obj in client.sse(resp)]
        finally:
            await client.close()
            srv.close()

    assert asyncio.run(run()) == words
