"""A test double of the Hugging Face Hub's HTTP API, for tests only.

It speaks the part of the Hub protocol that the unmodified ``huggingface_hub`` client (with
``HF_HUB_DISABLE_XET=1``, i.e. the LFS path) uses to create a repo, upload files, make branches and
download files, and that ``transformers`` / ``peft`` use in ``from_pretrained``:

=========================================================  ==============================================
``GET  /api/whoami-v2``                                     who the token belongs to
``POST /api/repos/create``, ``DELETE /api/repos/delete``    repos (409 when it exists: ``exist_ok`` relies
                                                            on it)
``POST /api/validate-yaml``                                 README front matter check (stdlib: delimiters)
``GET  /api/{type}s/{repo}[/revision/{rev}]``               repo info (``?blobs=1`` adds sizes and LFS)
``GET  /api/{type}s/{repo}/tree/{rev}[/{path}]``            listing (``?recursive=1``)
``GET  /api/{type}s/{repo}/refs``, ``/commits/{rev}``       branches, history
``POST /api/{type}s/{repo}/branch/{branch}``                create a branch (``startingPoint``), DELETE
``POST /api/{type}s/{repo}/preupload/{rev}``                regular or LFS, per file
``POST /{repo}.git/info/lfs/objects/batch``                 LFS upload actions: a PUT URL and a verify URL
``PUT  /_test-hub/lfs-upload/{id}``                         the "presigned" upload (no auth, like S3)
``POST /{repo}.git/info/lfs/objects/verify``                LFS verify
``POST /api/{type}s/{repo}/commit/{rev}``                   NDJSON commit: header, file, lfsFile,
                                                            deletedFile, deletedFolder
``HEAD|GET /{repo}/resolve/{rev}/{path}``                   file bytes with ``X-Repo-Commit``, ``ETag``,
                                                            ``X-Linked-Etag``/``X-Linked-Size`` (LFS),
                                                            ``Content-Length``; ``Range`` supported
=========================================================  ==============================================

Errors carry the headers the client turns into typed exceptions: ``X-Error-Code: RepoNotFound``,
``RevisionNotFound``, ``EntryNotFound`` (with ``X-Repo-Commit``, which transformers' optional-file probes
cache), 401 with ``X-Error-Message: Invalid credentials in Authorization header`` for a wrong token (any
endpoint) and 401 for a missing token on a write endpoint or a private repo.

Repos, commits and file contents live on disk under ``root`` (a temporary directory unless given):
``objects/`` holds contents by sha256, ``repos/{type}s/{namespace}/{name}/repo.json`` the branches and
commit trees. A server started on an existing ``root`` sees its repos again. Only the standard library is
used (``http.server.ThreadingHTTPServer`` on 127.0.0.1, random port).

Use from a test, in process (``patch_client`` sets the environment *and* the values ``huggingface_hub``
read from it at import time, so the already imported client talks to this server)::

    from testkit.hub_server import HubTestServer

    def test_something(tmp_path, monkeypatch):
        with HubTestServer(token="hf_test") as hub:
            hub.patch_client(monkeypatch, tmp_path / "hf_home")  # HF_ENDPOINT, HF_HOME, offline off, no Xet
            ...  # huggingface_hub / transformers / peft calls now reach the test server

or in a fresh interpreter, where the client reads the environment itself (robust for anything that caches
settings at import, e.g. ``trust_remote_code`` modules)::

    result = hub.run_client("from transformers import AutoConfig; AutoConfig.from_pretrained('org/m')",
                            hf_home=tmp_path / "hf_home", token=hub.token)

``hub.client_env(hf_home, token=...)`` gives that environment for your own ``subprocess`` call. A pytest
fixture in three lines (the valid token is ``HubTestServer.DEFAULT_TOKEN``, HF_HOME is fresh per test)::

    from testkit.hub_server import hub_for_test

    @pytest.fixture
    def hub(tmp_path, monkeypatch):
        yield from hub_for_test(tmp_path, monkeypatch)
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HubTestServer", "hub_for_test"]

REPO_TYPE_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # files this large go through LFS whatever their name
_LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1024 * 1024

# The .gitattributes the Hub puts into a new repo (its first commit), trimmed to the common patterns.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z *.arrow *.bin *.bz2 *.ckpt *.ftz *.gguf *.gz *.h5 *.joblib *.lfs.* *.mlmodel *.model *.msgpack "
        "*.npy *.npz *.onnx *.ot *.parquet *.pb *.pickle *.pkl *.pt *.pth *.rar *.safetensors "
        "saved_model/**/* *.tar.* *.tar *.tflite *.tgz *.wasm *.xz *.zip *.zst *tfevents*"
    ).split()
)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _HttpError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] = (),
        body: Mapping[str, Any] = (),
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers)
        self.body = dict(body)


def _not_found_repo(repo_id: str) -> _HttpError:
    return _HttpError(404, f"Repository not found: {repo_id}", "RepoNotFound")


def _not_found_revision(rev: str) -> _HttpError:
    return _HttpError(404, f"Invalid rev id: {rev}", "RevisionNotFound")


class _Repo:
    """One repo: branches -> commit oid, commits -> {parents, title, message, date, author, tree}.

    A tree maps each file path to {"sha256", "size", "lfs", "oid"} ("oid" is git's blob id, of the pointer
    file for LFS files, as on the Hub).
    """

    def __init__(self, repo_type: str, repo_id: str, private: bool, data: dict[str, Any] | None = None):
        self.repo_type = repo_type
        self.repo_id = repo_id
        self.private = private
        self.created_at = _now()
        self.branches: dict[str, str] = {}
        self.commits: dict[str, dict[str, Any]] = {}
        if data is not None:
            self.private = data["private"]
            self.created_at = data["createdAt"]
            self.branches = data["branches"]
            self.commits = data["commits"]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.repo_type,
            "id": self.repo_id,
            "private": self.private,
            "createdAt": self.created_at,
            "branches": self.branches,
            "commits": self.commits,
        }

    def resolve(self, rev: str) -> str:
        """Commit oid of a branch name, ``refs/heads/...``, full commit oid or unique oid prefix (>= 7)."""
        name = rev[len("refs/heads/") :] if rev.startswith("refs/heads/") else rev
        if name in self.branches:
            return self.branches[name]
        if rev in self.commits:
            return rev
        if re.fullmatch(r"[0-9a-f]{7,39}", rev):
            matches = [oid for oid in self.commits if oid.startswith(rev)]
            if len(matches) == 1:
                return matches[0]
        raise _not_found_revision(rev)

    def tree(self, commit: str) -> dict[str, dict[str, Any]]:
        return self.commits[commit]["tree"]

    def history(self, commit: str) -> list[str]:
        out = []
        while commit:
            out.append(commit)
            parents = self.commits[commit]["parents"]
            commit = parents[0] if parents else ""
        return out


class _Store:
    """Repos and contents on disk, shared by the request threads (one lock)."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        (root / "repos").mkdir(exist_ok=True)
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.pending_uploads: dict[str, tuple[str, int]] = {}  # upload id -> (sha256, size)
        for path in sorted((root / "repos").glob("*/*/*/repo.json")):
            data = json.loads(path.read_text())
            self.repos[(data["type"], data["id"])] = _Repo(data["type"], data["id"], data["private"], data)

    # contents
    def object_path(self, sha256: str) -> Path:
        return self.objects / sha256[:2] / sha256[2:]

    def has_object(self, sha256: str, size: int | None = None) -> bool:
        path = self.object_path(sha256)
        return path.is_file() and (size is None or path.stat().st_size == size)

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        path = self.object_path(sha)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return sha

    def read(self, sha256: str) -> bytes:
        return self.object_path(sha256).read_bytes()

    def entry_for(self, sha256: str, size: int, lfs: bool) -> dict[str, Any]:
        if lfs:
            pointer = _LFS_POINTER.format(oid=sha256, size=size).encode()
            return {"sha256": sha256, "size": size, "lfs": True, "oid": _git_blob_oid(pointer)}
        return {"sha256": sha256, "size": size, "lfs": False, "oid": _git_blob_oid(self.read(sha256))}

    # repos
    def repo_dir(self, repo: _Repo) -> Path:
        return self.root / "repos" / f"{repo.repo_type}s" / repo.repo_id

    def save(self, repo: _Repo) -> None:
        folder = self.repo_dir(repo)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"repo.json.{secrets.token_hex(4)}.tmp"
        tmp.write_text(json.dumps(repo.to_json(), indent=1))
        os.replace(tmp, folder / "repo.json")

    def commit(
        self,
        repo: _Repo,
        branch: str,
        tree: dict[str, dict[str, Any]],
        title: str,
        message: str,
        author: str,
        parents: list[str],
    ) -> str:
        date = _now()
        seed = json.dumps([parents, tree, title, message, date, secrets.token_hex(8)], sort_keys=True)
        oid = hashlib.sha1(seed.encode()).hexdigest()
        repo.commits[oid] = {
            "parents": parents,
            "title": title,
            "message": message,
            "date": date,
            "author": author,
            "tree": tree,
        }
        repo.branches[branch] = oid
        self.save(repo)
        return oid

    def create_repo(self, repo_type: str, repo_id: str, private: bool, author: str) -> _Repo:
        repo = _Repo(repo_type, repo_id, private)
        sha = self.put_bytes(DEFAULT_GITATTRIBUTES.encode())
        tree = {".gitattributes": self.entry_for(sha, len(DEFAULT_GITATTRIBUTES.encode()), lfs=False)}
        self.repos[(repo_type, repo_id)] = repo
        self.commit(repo, "main", tree, "initial commit", "", author, [])
        return repo

    def delete_repo(self, repo: _Repo) -> None:
        del self.repos[(repo.repo_type, repo.repo_id)]
        shutil.rmtree(self.repo_dir(repo), ignore_errors=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

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
                    chunk = self.rfile.read(min(remaining, _CHUNK))
                    if not chunk:
                        return
                    remaining -= len(chunk)
                    yield chunk
                self.rfile.readline()
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, _CHUNK))
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
            raise _HttpError(400, f"invalid JSON body: {exc}") from None

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

    def _send_error(self, err: _HttpError) -> None:
        headers = {"X-Error-Message": err.message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._send(err.status, {"error": err.message, **err.body}, headers)

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        self._body_done = False
        try:
            for route_method, pattern, name in _ROUTES:
                if route_method != method and not (route_method == "GET" and method == "HEAD"):
                    continue
                match = pattern.fullmatch(path)
                if match is None:
                    continue
                if method in ("POST", "PUT", "DELETE") and name not in _STREAMING:
                    self._body = self._json_body() if name not in _RAW_BODY else b"".join(self._iter_body())
                getattr(self, name)(query=query, **{k: unquote(v) for k, v in match.groupdict().items() if v})
                return
            raise _HttpError(404, f"no such endpoint: {method} {path}")
        except _HttpError as err:
            if not self._body_done:  # keep the connection usable: a request body must be read to its end
                for _ in self._iter_body():
                    pass
            self._send_error(err)
        except Exception as exc:  # a bug in the test double: answer 500 and keep the traceback for the test
            self.server.owner.errors.append(traceback.format_exc())
            if not self._body_done:
                for _ in self._iter_body():
                    pass
            self._send_error(_HttpError(500, f"test hub error: {type(exc).__name__}: {exc}"))

    # auth
    def _token_user(self, required: bool) -> str | None:
        """User of the bearer token; 401 for a wrong token anywhere, or for none when ``required``."""
        header = self.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        if token:
            user = self.server.owner.tokens.get(token)
            if user is None:
                raise _HttpError(401, "Invalid credentials in Authorization header")
            return user
        if required:
            raise _HttpError(401, "You must be authenticated to access this resource (missing token)")
        return None

    def _repo(self, repo_type: str, repo_id: str, *, write: bool) -> _Repo:
        user = self._token_user(required=write)
        repo = self.server.owner.store.repos.get((repo_type, repo_id))
        if repo is None:
            raise _not_found_repo(repo_id)
        if repo.private and user is None:
            # what the Hub answers for a private repo without credentials
            raise _HttpError(401, f"Repository not found: {repo_id}", "RepoNotFound")
        return repo

    def _url(self, repo: _Repo, suffix: str = "") -> str:
        return f"{self.server.owner.endpoint}/{REPO_TYPE_PREFIXES[repo.repo_type]}{repo.repo_id}{suffix}"

    @property
    def store(self) -> _Store:
        return self.server.owner.store

    # endpoints: account and repos
    def whoami(self, query: dict) -> None:
        user = self._token_user(required=True)
        self._send(
            200,
            {
                "type": "user",
                "id": hashlib.sha1(str(user).encode()).hexdigest()[:24],
                "name": user,
                "fullname": user,
                "email": f"{user}@example.invalid",
                "emailVerified": True,
                "isPro": False,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}},
            },
        )

    def agent_harnesses(self, query: dict) -> None:
        self._send(200, {"standardEnvVars": [], "harnesses": {}})

    def create_repo(self, query: dict) -> None:
        user = self._token_user(required=True)
        body = self._body
        name, organization = body.get("name"), body.get("organization")
        repo_type = body.get("type") or "model"
        if not name or repo_type not in REPO_TYPE_PREFIXES:
            raise _HttpError(400, "invalid repo name or type")
        repo_id = f"{organization or user}/{name}"
        visibility = body.get("visibility")
        private = visibility == "private" if visibility else bool(body.get("private", False))
        with self.store.lock:
            existing = self.store.repos.get((repo_type, repo_id))
            if existing is not None:  # the Hub's 409 carries the repo URL, which create_repo(exist_ok=True) returns
                raise _HttpError(409, f"You already created this {repo_type} repo", body={"url": self._url(existing)})
            repo = self.store.create_repo(repo_type, repo_id, private, str(user))
        self._send(200, {"url": self._url(repo), "name": repo_id, "id": repo_id})

    def delete_repo(self, query: dict) -> None:
        body = self._body
        repo_type = body.get("type") or "model"
        user = self._token_user(required=True)
        repo_id = f"{body.get('organization') or user}/{body.get('name')}"
        with self.store.lock:
            repo = self._repo(repo_type, repo_id, write=True)
            self.store.delete_repo(repo)
        self._send(200, {})

    def validate_yaml(self, query: dict) -> None:
        content = self._body.get("content", "")
        errors = []
        lines = content.splitlines()
        if lines and lines[0].strip() == "---" and "---" not in (line.strip() for line in lines[1:]):
            errors.append({"message": "metadata block opened with '---' is never closed"})
        if errors:
            self._send(400, {"errors": errors, "warnings": []}, {"X-Error-Message": errors[0]["message"]})
        else:
            self._send(200, {"errors": [], "warnings": []})

    def repo_info(self, query: dict, kind: str, repo: str, rev: str = "main") -> None:
        r = self._repo(_PLURAL[kind], repo, write=False)
        commit = r.resolve(rev)
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path, entry in sorted(r.tree(commit).items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if entry["lfs"]:
                    pointer = _LFS_POINTER.format(oid=entry["sha256"], size=entry["size"])
                    sibling["lfs"] = {"size": entry["size"], "sha256": entry["sha256"], "pointerSize": len(pointer)}
            siblings.append(sibling)
        info = r.commits[commit]
        self._send(
            200,
            {
                "_id": hashlib.sha1(r.repo_id.encode()).hexdigest()[:24],
                "id": r.repo_id,
                "modelId": r.repo_id,
                "author": r.repo_id.split("/")[0],
                "sha": commit,
                "lastModified": info["date"],
                "createdAt": r.created_at,
                "private": r.private,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
                "usedStorage": sum(e["size"] for e in r.tree(commit).values()),
            },
        )

    def tree(self, query: dict, kind: str, repo: str, rev: str, path: str = "") -> None:
        r = self._repo(_PLURAL[kind], repo, write=False)
        commit = r.resolve(rev)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        path = path.strip("/")
        prefix = f"{path}/" if path else ""
        files = {p: e for p, e in r.tree(commit).items() if p.startswith(prefix)}
        if path and not files:
            raise _HttpError(404, f"{path} does not exist on {rev}", "EntryNotFound", {"X-Repo-Commit": commit})
        out: dict[str, dict[str, Any]] = {}
        for file_path, entry in files.items():
            rest = file_path[len(prefix) :].split("/")
            depth = len(rest) if recursive else 1
            for i in range(1, min(depth, len(rest) - 1) + 1):
                folder = prefix + "/".join(rest[:i])
                out[folder] = {
                    "type": "directory",
                    "oid": hashlib.sha1(f"{commit}:{folder}".encode()).hexdigest(),
                    "size": 0,
                    "path": folder,
                }
            if recursive or len(rest) == 1:
                item: dict[str, Any] = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": file_path}
                if entry["lfs"]:
                    pointer = _LFS_POINTER.format(oid=entry["sha256"], size=entry["size"])
                    item["lfs"] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": len(pointer)}
                out[file_path] = item
        self._send(200, [out[p] for p in sorted(out)])

    def refs(self, query: dict, kind: str, repo: str) -> None:
        r = self._repo(_PLURAL[kind], repo, write=False)
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid} for name, oid in sorted(r.branches.items())
        ]
        self._send(200, {"branches": branches, "converts": [], "tags": [], "pullRequests": []})

    def commits(self, query: dict, kind: str, repo: str, rev: str) -> None:
        r = self._repo(_PLURAL[kind], repo, write=False)
        items = []
        for oid in r.history(r.resolve(rev)):
            c = r.commits[oid]
            items.append(
                {
                    "id": oid,
                    "authors": [{"user": c["author"]}],
                    "date": c["date"],
                    "title": c["title"],
                    "message": c["message"],
                }
            )
        self._send(200, items)

    def create_branch(self, query: dict, kind: str, repo: str, branch: str) -> None:
        with self.store.lock:
            r = self._repo(_PLURAL[kind], repo, write=True)
            if branch in r.branches:
                raise _HttpError(409, f"Reference refs/heads/{branch} already exists")
            start = r.resolve(self._body.get("startingPoint") or "main")
            r.branches[branch] = start
            self.store.save(r)
        self._send(200, {})

    def delete_branch(self, query: dict, kind: str, repo: str, branch: str) -> None:
        with self.store.lock:
            r = self._repo(_PLURAL[kind], repo, write=True)
            if branch not in r.branches:
                raise _not_found_revision(branch)
            del r.branches[branch]
            self.store.save(r)
        self._send(200, {})

    # endpoints: upload
    def _lfs_patterns(self, r: _Repo, commit: str) -> list[str]:
        entry = r.tree(commit).get(".gitattributes")
        if entry is None:
            return []
        patterns = []
        for line in self.store.read(entry["sha256"]).decode(errors="replace").splitlines():
            fields = line.split()
            if len(fields) > 1 and "filter=lfs" in fields[1:]:
                patterns.append(fields[0])
        return patterns

    def preupload(self, query: dict, kind: str, repo: str, rev: str) -> None:
        r = self._repo(_PLURAL[kind], repo, write=True)
        commit = r.resolve(rev)
        patterns = self._lfs_patterns(r, commit)
        tree = r.tree(commit)
        files = []
        for item in self._body.get("files", []):
            path, size = item["path"], int(item["size"])
            sample = base64.b64decode(item.get("sample", ""))
            name = path.rsplit("/", 1)[-1]
            lfs = (
                size >= LFS_SIZE_THRESHOLD
                or b"\0" in sample
                or any(fnmatch.fnmatch(name if "/" not in p else path, p) for p in patterns)
            )
            existing = tree.get(path)
            remote_oid = None
            if existing is not None:
                remote_oid = existing["sha256"] if existing["lfs"] else existing["oid"]
            files.append(
                {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": remote_oid}
            )
        self._send(200, {"files": files, "commitOid": commit})

    def lfs_batch(self, query: dict, prefix: str | None = None, repo: str = "") -> None:
        repo_type = _PLURAL[prefix.rstrip("/")] if prefix else "model"
        r = self._repo(repo_type, repo, write=True)
        body = self._body
        if body.get("operation") != "upload":
            raise _HttpError(400, "the test hub only implements LFS uploads")
        objects = []
        for obj in body.get("objects", []):
            oid, size = str(obj.get("oid")), int(obj.get("size", -1))
            if not _HEX64.fullmatch(oid) or size < 0:
                objects.append({"oid": oid, "size": size, "error": {"code": 422, "message": "invalid oid or size"}})
            elif self.store.has_object(oid, size):
                objects.append({"oid": oid, "size": size})  # already there: no actions
            else:
                upload_id = secrets.token_urlsafe(16)
                with self.store.lock:
                    self.store.pending_uploads[upload_id] = (oid, size)
                endpoint = self.server.owner.endpoint
                objects.append(
                    {
                        "oid": oid,
                        "size": size,
                        "authenticated": True,
                        "actions": {
                            "upload": {"href": f"{endpoint}/_test-hub/lfs-upload/{upload_id}"},
                            "verify": {"href": self._url(r, ".git/info/lfs/objects/verify")},
                        },
                    }
                )
        self._send(200, {"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json")

    def lfs_upload(self, query: dict, upload_id: str) -> None:
        with self.store.lock:
            pending = self.store.pending_uploads.pop(upload_id, None)
        if pending is None:
            raise _HttpError(403, "unknown or used upload URL")
        oid, size = pending
        target = self.store.object_path(oid)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{secrets.token_hex(4)}.tmp")
        digest, written = hashlib.sha256(), 0
        with open(tmp, "wb") as f:
            for chunk in self._iter_body():
                digest.update(chunk)
                written += len(chunk)
                f.write(chunk)
        if digest.hexdigest() != oid or written != size:
            tmp.unlink()
            raise _HttpError(400, f"uploaded content does not match oid {oid} / size {size} (got {written} bytes)")
        os.replace(tmp, target)
        self._send(200, b"", {"ETag": f'"{hashlib.md5(oid.encode()).hexdigest()}"'})

    def lfs_verify(self, query: dict, prefix: str | None = None, repo: str = "") -> None:
        self._repo(_PLURAL[prefix.rstrip("/")] if prefix else "model", repo, write=True)
        oid, size = str(self._body.get("oid")), self._body.get("size")
        if not self.store.has_object(oid, size):
            raise _HttpError(404, f"LFS object {oid} not found")
        self._send(200, {"success": True})

    def commit(self, query: dict, kind: str, repo: str, rev: str) -> None:
        if query.get("create_pr", ["0"])[0] not in ("0", "false", ""):
            raise _HttpError(400, "the test hub does not implement pull requests (create_pr)")
        lines = [json.loads(line) for line in self._body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise _HttpError(400, "commit payload must start with a header line")
        header = lines[0]["value"]
        if not header.get("summary"):
            raise _HttpError(400, "commit summary is empty")
        with self.store.lock:
            r = self._repo(_PLURAL[kind], repo, write=True)
            user = self._token_user(required=True)
            if rev not in r.branches:
                if rev in r.commits:
                    raise _HttpError(400, f"cannot commit to {rev}: not a branch")
                raise _not_found_revision(rev)
            head = r.branches[rev]
            parent = header.get("parentCommit")
            if parent and r.resolve(parent) != head:
                raise _HttpError(412, f"A commit has happened since {parent}: the branch is at {head}")
            tree = dict(r.tree(head))
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                path = str(value.get("path", "")).strip("/")
                if not path:
                    raise _HttpError(400, f"{key}: empty path")
                if key == "file":
                    data = (
                        base64.b64decode(value["content"])
                        if value.get("encoding") == "base64"
                        else value["content"].encode()
                    )
                    sha = self.store.put_bytes(data)
                    tree[path] = self.store.entry_for(sha, len(data), lfs=False)
                elif key == "lfsFile":
                    oid = value.get("oid", "")
                    if not self.store.has_object(oid):
                        raise _HttpError(422, f"LFS object {oid} for {path} was never uploaded")
                    size = self.store.object_path(oid).stat().st_size
                    if value.get("size") not in (None, size):
                        raise _HttpError(422, f"LFS object {oid} has {size} bytes, commit says {value['size']}")
                    tree[path] = self.store.entry_for(oid, size, lfs=True)
                elif key == "deletedFile":
                    if tree.pop(path, None) is None:
                        raise _HttpError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                elif key == "deletedFolder":
                    doomed = [p for p in tree if p.startswith(path + "/")]
                    if not doomed:
                        raise _HttpError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
                else:
                    raise _HttpError(400, f"unknown commit operation {key!r}")
            oid = self.store.commit(r, rev, tree, header["summary"], header.get("description", ""), str(user), [head])
        self._send(
            200,
            {
                "success": True,
                "commitOid": oid,
                "commitUrl": self._url(r, f"/commit/{oid}"),
                "commitMessage": header["summary"],
                "hookOutput": "",
                "pullRequestUrl": None,
            },
        )

    # endpoints: download
    def resolve(self, query: dict, prefix: str | None = None, repo: str = "", rev: str = "", path: str = "") -> None:
        r = self._repo(_PLURAL[prefix.rstrip("/")] if prefix else "model", repo, write=False)
        commit = r.resolve(rev)
        entry = r.tree(commit).get(path)
        if entry is None:
            raise _HttpError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit})
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if entry["lfs"]:
            headers.update(
                {
                    "ETag": f'"{entry["sha256"]}"',
                    "X-Linked-Etag": f'"{entry["sha256"]}"',
                    "X-Linked-Size": str(entry["size"]),
                }
            )
        else:
            headers["ETag"] = f'"{entry["oid"]}"'
        size = entry["size"]
        start, end, status = 0, size - 1, 200
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if match and (match.group(1) or match.group(2)) and size:
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:
                start = max(size - int(match.group(2)), 0)
            if start > end:
                raise _HttpError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1 if size else 0
        if self.command == "HEAD":
            self._send(status, None, headers, "application/octet-stream", length=length)
            return
        with open(self.store.object_path(entry["sha256"]), "rb") as f:
            f.seek(start)
            data = f.read(length)
        self._send(status, data, headers, "application/octet-stream")


_REPO = r"(?P<repo>[^/]+/[^/]+)"
_KIND = r"(?P<kind>models|datasets|spaces)"
_PREFIX = r"(?P<prefix>datasets/|spaces/)?"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (method, re.compile(pattern), name)
    for method, pattern, name in [
        ("GET", r"/api/whoami-v2", "whoami"),
        ("GET", r"/api/agent-harnesses", "agent_harnesses"),
        ("POST", r"/api/repos/create", "create_repo"),
        ("DELETE", r"/api/repos/delete", "delete_repo"),
        ("POST", r"/api/validate-yaml", "validate_yaml"),
        ("GET", rf"/api/{_KIND}/{_REPO}/revision/(?P<rev>[^/]+)", "repo_info"),
        ("GET", rf"/api/{_KIND}/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
        ("GET", rf"/api/{_KIND}/{_REPO}/refs", "refs"),
        ("GET", rf"/api/{_KIND}/{_REPO}/commits/(?P<rev>[^/]+)", "commits"),
        ("POST", rf"/api/{_KIND}/{_REPO}/branch/(?P<branch>.+)", "create_branch"),
        ("DELETE", rf"/api/{_KIND}/{_REPO}/branch/(?P<branch>.+)", "delete_branch"),
        ("POST", rf"/api/{_KIND}/{_REPO}/preupload/(?P<rev>.+)", "preupload"),
        ("POST", rf"/api/{_KIND}/{_REPO}/commit/(?P<rev>.+)", "commit"),
        ("GET", rf"/api/{_KIND}/{_REPO}", "repo_info"),
        ("POST", rf"/{_PREFIX}{_REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
        ("POST", rf"/{_PREFIX}{_REPO}\.git/info/lfs/objects/verify", "lfs_verify"),
        ("PUT", r"/_test-hub/lfs-upload/(?P<upload_id>[A-Za-z0-9_-]+)", "lfs_upload"),
        ("GET", rf"/{_PREFIX}{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ]
]
_STREAMING = {"lfs_upload"}  # reads its own body
_RAW_BODY = {"commit"}  # NDJSON


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: HubTestServer


class HubTestServer:
    """A Hub test double on ``127.0.0.1`` with a random port; use as a context manager.

    ``token`` is the valid write token of ``user``; ``tokens`` maps further tokens to users. Any other
    token gets 401, as does a missing token on write endpoints. ``root`` keeps repos and contents on disk
    (a temporary directory, removed on exit, when not given).
    """

    DEFAULT_TOKEN = "hf_test_token_0123456789"

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        user: str = "tester",
        *,
        tokens: Mapping[str, str] | None = None,
        root: str | os.PathLike[str] | None = None,
    ):
        self.token = token
        self.user = user
        self.tokens: dict[str, str] = {token: user, **(tokens or {})}
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="test-hub-")) if root is None else Path(root)
        self.store = _Store(self.root)
        self.requests: list[tuple[str, str, int]] = []  # (method, path without query, status)
        self.errors: list[str] = []  # tracebacks of requests the double failed on (its own bugs)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> HubTestServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="test-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HubTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: what HF_ENDPOINT must be."""
        if self._server is None:
            raise RuntimeError("HubTestServer is not running: use it as a context manager or call start()")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _record(self, method: str, path: str, status: int) -> None:
        self.requests.append((method, urlsplit(path).path, status))

    # inspection, for assertions that do not go through the client
    def _get_repo(self, repo_id: str, repo_type: str = "model") -> _Repo:
        repo = self.store.repos.get((repo_type, repo_id))
        if repo is None:
            raise KeyError(f"no {repo_type} repo {repo_id!r} on the test hub")
        return repo

    def repo_exists(self, repo_id: str, repo_type: str = "model") -> bool:
        return (repo_type, repo_id) in self.store.repos

    def branches(self, repo_id: str, repo_type: str = "model") -> dict[str, str]:
        """Branch name -> head commit oid."""
        return dict(self._get_repo(repo_id, repo_type).branches)

    def commit_titles(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> list[str]:
        """Commit titles from ``revision`` back to the first commit."""
        repo = self._get_repo(repo_id, repo_type)
        with self.store.lock:
            return [repo.commits[oid]["title"] for oid in repo.history(repo.resolve(revision))]

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """Path -> content of every file at ``revision``."""
        repo = self._get_repo(repo_id, repo_type)
        with self.store.lock:
            tree = repo.tree(repo.resolve(revision))
            return {path: self.store.read(entry["sha256"]) for path, entry in sorted(tree.items())}

    def lfs_paths(self, repo_id: str, revision: str = "main", repo_type: str = "model") -> set[str]:
        """Paths stored as LFS objects at ``revision``."""
        repo = self._get_repo(repo_id, repo_type)
        with self.store.lock:
            return {path for path, entry in repo.tree(repo.resolve(revision)).items() if entry["lfs"]}

    def url(self, repo_id: str, filename: str, revision: str = "main") -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(filename)}"

    # clients
    def client_env(
        self,
        hf_home: str | os.PathLike[str],
        token: str | None = None,
        base: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Environment for a fresh interpreter whose huggingface_hub / transformers talk to this server.

        Starts from ``base`` (default ``os.environ``), drops every HF/transformers setting that would point
        elsewhere, and sets HF_ENDPOINT, HF_HOME (and the caches below it), offline mode off, Xet off,
        telemetry off, and HF_TOKEN when ``token`` is given.
        """
        env = {
            k: v
            for k, v in (os.environ if base is None else base).items()
            if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_")) or k == "TRANSFORMERS_VERBOSITY"
        }
        home = str(Path(hf_home))
        env.update(
            {
                "HF_ENDPOINT": self.endpoint,
                "HF_HOME": home,
                "HF_HUB_CACHE": os.path.join(home, "hub"),
                "HF_ASSETS_CACHE": os.path.join(home, "assets"),
                "HF_XET_CACHE": os.path.join(home, "xet"),
                "HF_MODULES_CACHE": os.path.join(home, "modules"),
                "HF_TOKEN_PATH": os.path.join(home, "token"),
                "HF_HUB_OFFLINE": "0",
                "TRANSFORMERS_OFFLINE": "0",
                "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "HF_HUB_DISABLE_IMPLICIT_TOKEN": "0",
            }
        )
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    def run_client(
        self,
        code: str,
        hf_home: str | os.PathLike[str],
        token: str | None = None,
        *,
        check: bool = True,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -c code`` in a fresh interpreter with :meth:`client_env`.

        With ``check`` a non-zero exit raises AssertionError carrying the child's stdout and stderr.
        """
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env=self.client_env(hf_home, token),
            capture_output=True,
            text=True,
            cwd=cwd,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"client process failed ({proc.returncode})\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
            )
        return proc

    def patch_client(self, monkeypatch: Any, hf_home: str | os.PathLike[str], token: str | None = None) -> None:
        """Point this process's huggingface_hub (and transformers, if imported) at this server.

        ``monkeypatch`` is pytest's fixture (anything with ``setenv``/``delenv``/``setattr``), so every
        change is undone after the test. Sets the environment like :meth:`client_env` and the module values
        huggingface_hub computed from it at import time: endpoint and URL template, the module-level
        ``HfApi``'s endpoint, offline mode, Xet, cache and token paths. ``token`` becomes HF_TOKEN; without it
        no token is found (the fresh HF_HOME has none) unless a call passes one.
        """
        home = Path(hf_home)
        home.mkdir(parents=True, exist_ok=True)
        env = self.client_env(home, token)
        for key in list(os.environ):
            if key not in env:
                monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        if token is None:
            monkeypatch.delenv("HF_TOKEN", raising=False)

        from huggingface_hub import constants

        values: dict[str, Any] = {
            "ENDPOINT": self.endpoint,
            "HUGGINGFACE_CO_URL_TEMPLATE": self.endpoint + "/{repo_id}/resolve/{revision}/{filename}",
            "HF_HUB_OFFLINE": False,
            "HF_HUB_DISABLE_XET": True,
            "HF_HUB_DISABLE_TELEMETRY": True,
            "HF_HUB_DISABLE_IMPLICIT_TOKEN": False,
            "HF_HOME": env["HF_HOME"],
            "HF_HUB_CACHE": env["HF_HUB_CACHE"],
            "HUGGINGFACE_HUB_CACHE": env["HF_HUB_CACHE"],
            "HF_ASSETS_CACHE": env["HF_ASSETS_CACHE"],
            "HUGGINGFACE_ASSETS_CACHE": env["HF_ASSETS_CACHE"],
            "HF_XET_CACHE": env["HF_XET_CACHE"],
            "HF_TOKEN_PATH": env["HF_TOKEN_PATH"],
            "HF_STORED_TOKENS_PATH": os.path.join(env["HF_HOME"], "stored_tokens"),
            "AGENT_HARNESSES_PATH": os.path.join(env["HF_HOME"], ".agent_harnesses.json"),
            "CHECK_FOR_UPDATE_DONE_PATH": os.path.join(env["HF_HOME"], ".check_for_update_done"),
            "CHECK_FOR_SKILL_UPDATE_DONE_PATH": os.path.join(env["HF_HOME"], ".check_for_skill_update_done"),
        }
        hosts = getattr(constants, "HF_URL_HOSTS", None)
        if hosts is not None:
            values["HF_URL_HOSTS"] = frozenset(hosts) | {"127.0.0.1"}
        for name, value in values.items():
            if hasattr(constants, name):
                monkeypatch.setattr(constants, name, value)

        # names copied out of `constants` by `from ..constants import X` at import time
        copied = {
            "huggingface_hub.utils._cache_manager": {"HF_HUB_CACHE": env["HF_HUB_CACHE"]},
            "huggingface_hub.utils._cache_assets": {"HF_ASSETS_CACHE": env["HF_ASSETS_CACHE"]},
            "huggingface_hub.utils._git_credential": {"ENDPOINT": self.endpoint},
            "transformers.utils.hub": {"HF_MODULES_CACHE": env["HF_MODULES_CACHE"]},
            "transformers.dynamic_module_utils": {"HF_MODULES_CACHE": env["HF_MODULES_CACHE"]},
        }
        for module_name, names in copied.items():
            module = sys.modules.get(module_name)
            for name, value in names.items():
                if module is not None and hasattr(module, name):
                    monkeypatch.setattr(module, name, value)

        hf_api = sys.modules.get("huggingface_hub.hf_api")
        if hf_api is not None and hasattr(hf_api, "api"):
            monkeypatch.setattr(hf_api.api, "endpoint", self.endpoint)
        detect = sys.modules.get("huggingface_hub.utils._detect_agent")
        if detect is not None and hasattr(detect, "_registry"):
            monkeypatch.setattr(detect, "_registry", {"standardEnvVars": [], "harnesses": {}})


def hub_for_test(tmp_path: str | os.PathLike[str], monkeypatch: Any, **kwargs: Any) -> Iterator[HubTestServer]:
    """Body of a pytest fixture: a running HubTestServer with this process's client pointed at it.

    Fresh HF_HOME under ``tmp_path``, no HF_TOKEN (pass the token to calls, or ``monkeypatch.setenv``);
    ``kwargs`` go to HubTestServer. Fails the test at teardown if the server hit a bug of its own::

        @pytest.fixture
        def hub(tmp_path, monkeypatch):
            yield from hub_for_test(tmp_path, monkeypatch)
    """
    with HubTestServer(**kwargs) as server:
        server.patch_client(monkeypatch, Path(tmp_path) / "hf_home")
        yield server
        assert not server.errors, "the test hub failed on a request:\n" + "\n".join(server.errors)
