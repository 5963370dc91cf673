"""A stand-in Hugging Face Hub: the part of the Hub's HTTP API that huggingface_hub uses to list
a repo and download its files, served from local files on a thread (reached through HF_ENDPOINT).

- GET /api/models/OWNER/REPO[/revision/REV][?blobs=True]: the repo's info, with `siblings`
  (rfilename, size, blobId, lfs {sha256, size, pointerSize}) and `sha` (the commit);
- HEAD and GET /OWNER/REPO/resolve/REV/PATH: a file, with X-Repo-Commit, X-Linked-Etag (the
  LFS sha256), X-Linked-Size; GET honours `Range: bytes=N-` with a 206.

Errors as the Hub answers them (huggingface_hub reads X-Error-Code): a missing or private repo
is a 401 RepoNotFound without a token and a 404 with one; a gated repo's files are a 401
GatedRepo without a token, a 403 GatedRepo with a token that was not granted access; a token
the Hub does not know is a 401 "Invalid credentials in Authorization header".

Faults a test can ask for, once each, by "REPO/FILE": `cut[...] = n` sends n bytes of the body and
closes the connection; `stall[...] = n` sends n bytes and waits until `release()`; `corrupt`
(a set, not once) serves the file with its bytes changed (same size, same advertised sha256). Every request is
kept in `requests` (method, path, headers) for the tests to read.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.conftest import free_port


@dataclass
class StubFile:
    source: Path  # the bytes served
    lfs: bool = True

    def __post_init__(self) -> None:
        self.size = self.source.stat().st_size
        h, g = hashlib.sha256(), hashlib.sha1(f"blob {self.size}\0".encode())  # the LFS id, the git blob id
        with self.source.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                g.update(chunk)
        self.sha256, self.git_oid = h.hexdigest(), g.hexdigest()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid


@dataclass
class StubRepo:
    files: dict[str, StubFile]
    gated: bool = False  # files need a token that was granted access
    private: bool = False  # the repo is invisible without a granted token
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    granted: set[str] = field(default_factory=set)  # tokens with access


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class StubHub:
    def __init__(self) -> None:
        self.repos: dict[str, StubRepo] = {}
        self.tokens: set[str] = set()  # tokens the Hub knows (granted or not)
        self.requests: list[Seen] = []
        self.cut: dict[str, int] = {}
        self.stall: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self._released = threading.Event()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, head=True)

            def do_GET(self) -> None:
                hub._serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()

    def release(self) -> None:
        self._released.set()

    def add(self, repo: str, files: dict[str, Path], **kw: Any) -> StubRepo:
        self.repos[repo] = StubRepo({name: StubFile(path, lfs=name.endswith(".gguf")) for name, path in files.items()}, **kw)
        return self.repos[repo]

    def seen(self, method: str, needle: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method and needle in r.path]

    # -- answering -----------------------------------------------------------------------------
    def _reply(self, h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False) -> None:
        h.send_response(status)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}.items():
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(
        self, h: BaseHTTPRequestHandler, status: int, code: str | None, message: str, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {}), **(extra or {})}
        self._reply(h, status, json.dumps({"error": message}).encode(), headers, head)

    def _access(self, h: BaseHTTPRequestHandler, repo_id: str, head: bool, *, files: bool) -> StubRepo | None:
        """The repo when the request may see it; else the Hub's error is sent and None returned."""
        auth = h.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        if token is not None and token not in self.tokens:
            self._error(h, 401, None, "Invalid credentials in Authorization header", head)
            return None
        repo = self.repos.get(repo_id)
        hidden = repo is None or (repo.private and token not in repo.granted)
        if hidden:
            # the Hub does not say whether a repo exists to those who cannot see it
            self._error(h, 404 if token else 401, "RepoNotFound", "Repository not found", head)
            return None
        assert repo is not None
        if files and repo.gated and token not in repo.granted:
            status = 403 if token else 401
            self._error(h, status, "GatedRepo", f"Access to model {repo_id} is restricted.", head)
            return None
        return repo

    def _serve(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        self.requests.append(Seen("HEAD" if head else "GET", h.path, dict(h.headers.items())))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            repo = self._access(h, repo_id, head, files=False)
            if repo is not None:
                self._reply(h, 200, json.dumps(self._info(repo_id, repo)).encode(), head=head)
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id, name = "/".join(parts[:2]), "/".join(parts[4:])
            repo = self._access(h, repo_id, head, files=True)
            if repo is None:
                return
            f = repo.files.get(name)
            if f is None:
                self._error(h, 404, "EntryNotFound", f"{name} does not exist", head, {"X-Repo-Commit": repo.commit})
                return
            self._file(h, repo, f"{repo_id}/{name}", f, head)
            return
        self._error(h, 404, None, "no such route in the stand-in Hub", head)

    def _info(self, repo_id: str, repo: StubRepo) -> dict[str, Any]:
        siblings = []
        for name, f in sorted(repo.files.items()):
            item: dict[str, Any] = {"rfilename": name, "size": f.size, "blobId": f.git_oid}
            if f.lfs:
                item["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(item)
        return {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": repo.private, "gated": "manual" if repo.gated else False, "siblings": siblings}

    def _file(self, h: BaseHTTPRequestHandler, repo: StubRepo, name: str, f: StubFile, head: bool) -> None:
        headers = {
            "Content-Type": "application/octet-stream", "X-Repo-Commit": repo.commit, "ETag": f'"{f.etag}"',
            "Accept-Ranges": "bytes",
        }
        if f.lfs:
            headers |= {"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)}
        start = 0
        ranged = h.headers.get("Range", "")
        if not head and ranged.startswith("bytes=") and ranged.endswith("-"):
            start = int(ranged[6:-1])
        length = f.size - start
        h.send_response(206 if start else 200)
        for k, v in {**headers, "Content-Length": str(length)}.items():
            h.send_header(k, v)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{f.size - 1}/{f.size}")
        h.end_headers()
        if head:
            return
        cut, stall = self.cut.pop(name, None), self.stall.pop(name, None)
        corrupt = name in self.corrupt
        sent = 0
        with f.source.open("rb") as src:
            src.seek(start)
            while chunk := src.read(1 << 20):
                if corrupt:
                    chunk = bytes(b ^ 0x5A for b in chunk)
                limit = cut if cut is not None else stall
                if limit is not None and sent + len(chunk) >= limit:
                    h.wfile.write(chunk[: limit - sent])
                    h.wfile.flush()
                    if stall is not None:
                        self._released.wait(600)
                    h.close_connection = True
                    h.connection.close()
                    return
                h.wfile.write(chunk)
                sent += len(chunk)
