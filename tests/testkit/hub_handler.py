"""The test Hub's HTTP plumbing: body reading, answers, errors, routing and authentication."""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from testkit.hub_routes import RAW_BODY, ROUTES, STREAMING, HubRoutes
from testkit.hub_store import CHUNK, REPO_TYPE_PREFIXES, HttpError, Repo, Store, not_found_repo


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: Any  # the HubTestServer that started it


class HubHandler(HubRoutes, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubHTTPServer

    # plumbing
    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in HubTestServer.requests; never echo headers (tokens) anywhere

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _iter_body(self) -> Iterator[bytes]:
        """The request body in pieces (Content-Length or chunked); marks it consumed when done."""
        yield from self._iter_raw_body()
        self._body_done = True

    def _iter_raw_body(self) -> Iterator[bytes]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                remaining = size
                while remaining:
                    chunk = self.rfile.read(min(remaining, CHUNK))
                    if not chunk:
                        return
                    remaining -= len(chunk)
                    yield chunk
                self.rfile.readline()
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, CHUNK))
                if not chunk:
                    return
                remaining -= len(chunk)
                yield chunk

    def _json_body(self) -> Any:
        raw = b"".join(self._iter_body())
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise HttpError(400, f"invalid JSON body: {exc}") from None

    def _send(
        self,
        status: int,
        body: Any = None,
        headers: Mapping[str, str] = (),
        content_type: str = "application/json",
        length: int | None = None,
    ) -> None:
        if body is None:
            data = b""
        elif isinstance(body, bytes):
            data = body
        else:
            data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for key, value in dict(headers).items():
            self.send_header(key, value)
        self.server.owner._record(self.command, self.path, status)  # before the client can see the answer
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_error(self, err: HttpError) -> None:
        headers = {"X-Error-Message": err.message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._send(err.status, {"error": err.message, **err.body}, headers)

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        self._body_done = False
        try:
            for route_method, pattern, name in ROUTES:
                if route_method != method and not (route_method == "GET" and method == "HEAD"):
                    continue
                match = pattern.fullmatch(path)
                if match is None:
                    continue
                if method in ("POST", "PUT", "DELETE") and name not in STREAMING:
                    self._body = self._json_body() if name not in RAW_BODY else b"".join(self._iter_body())
                getattr(self, name)(query=query, **{k: unquote(v) for k, v in match.groupdict().items() if v})
                return
            raise HttpError(404, f"no such endpoint: {method} {path}")
        except HttpError as err:
            if not self._body_done:  # keep the connection usable: a request body must be read to its end
                for _ in self._iter_body():
                    pass
            self._send_error(err)
        except Exception as exc:  # a bug in the test double: answer 500 and keep the traceback for the test
            self.server.owner.errors.append(traceback.format_exc())
            if not self._body_done:
                for _ in self._iter_body():
                    pass
            self._send_error(HttpError(500, f"test hub error: {type(exc).__name__}: {exc}"))

    # auth
    def _token_user(self, required: bool) -> str | None:
        """User of the bearer token; 401 for a wrong token anywhere, or for none when ``required``."""
        header = self.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        if token:
            user = self.server.owner.tokens.get(token)
            if user is None:
                raise HttpError(401, "Invalid credentials in Authorization header")
            return user
        if required:
            raise HttpError(401, "You must be authenticated to access this resource (missing token)")
        return None

    def _repo(self, repo_type: str, repo_id: str, *, write: bool) -> Repo:
        user = self._token_user(required=write)
        repo = self.server.owner.store.repos.get((repo_type, repo_id))
        if repo is None:
            raise not_found_repo(repo_id)
        if repo.private and user is None:
            # what the Hub answers for a private repo without credentials
            raise HttpError(401, f"Repository not found: {repo_id}", "RepoNotFound")
        return repo

    def _url(self, repo: Repo, suffix: str = "") -> str:
        return f"{self.server.owner.endpoint}/{REPO_TYPE_PREFIXES[repo.repo_type]}{repo.repo_id}{suffix}"

    @property
    def store(self) -> Store:
        return self.server.owner.store
