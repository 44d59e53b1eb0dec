"""The test Hub's endpoints (a mixin of ``hub_handler.HubHandler``, which gives them ``_send``, ``_repo``,
``_token_user``, ``_body`` and ``store``) and the table that routes a request's method and path to one of them."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import secrets
from typing import Any

from testkit.hub_store import (
    HEX64,
    LFS_POINTER,
    LFS_SIZE_THRESHOLD,
    PLURAL,
    REPO_TYPE_PREFIXES,
    HttpError,
    Repo,
    not_found_revision,
)


class HubRoutes:
    """One method per endpoint, named in ``ROUTES``; each answers through ``self._send`` or raises HttpError."""

    # declared for readers and linters; HubHandler provides them
    _body: Any

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
            raise HttpError(400, "invalid repo name or type")
        repo_id = f"{organization or user}/{name}"
        visibility = body.get("visibility")
        private = visibility == "private" if visibility else bool(body.get("private", False))
        with self.store.lock:
            existing = self.store.repos.get((repo_type, repo_id))
            if existing is not None:  # the Hub's 409 carries the repo URL, which create_repo(exist_ok=True) returns
                raise HttpError(409, f"You already created this {repo_type} repo", body={"url": self._url(existing)})
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
        r = self._repo(PLURAL[kind], repo, write=False)
        commit = r.resolve(rev)
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path, entry in sorted(r.tree(commit).items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if entry["lfs"]:
                    pointer = LFS_POINTER.format(oid=entry["sha256"], size=entry["size"])
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
        r = self._repo(PLURAL[kind], repo, write=False)
        commit = r.resolve(rev)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        path = path.strip("/")
        prefix = f"{path}/" if path else ""
        files = {p: e for p, e in r.tree(commit).items() if p.startswith(prefix)}
        if path and not files:
            raise HttpError(404, f"{path} does not exist on {rev}", "EntryNotFound", {"X-Repo-Commit": commit})
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
                    pointer = LFS_POINTER.format(oid=entry["sha256"], size=entry["size"])
                    item["lfs"] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": len(pointer)}
                out[file_path] = item
        self._send(200, [out[p] for p in sorted(out)])

    def refs(self, query: dict, kind: str, repo: str) -> None:
        r = self._repo(PLURAL[kind], repo, write=False)
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid} for name, oid in sorted(r.branches.items())
        ]
        self._send(200, {"branches": branches, "converts": [], "tags": [], "pullRequests": []})

    def commits(self, query: dict, kind: str, repo: str, rev: str) -> None:
        r = self._repo(PLURAL[kind], repo, write=False)
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
            r = self._repo(PLURAL[kind], repo, write=True)
            if branch in r.branches:
                raise HttpError(409, f"Reference refs/heads/{branch} already exists")
            start = r.resolve(self._body.get("startingPoint") or "main")
            r.branches[branch] = start
            self.store.save(r)
        self._send(200, {})

    def delete_branch(self, query: dict, kind: str, repo: str, branch: str) -> None:
        with self.store.lock:
            r = self._repo(PLURAL[kind], repo, write=True)
            if branch not in r.branches:
                raise not_found_revision(branch)
            del r.branches[branch]
            self.store.save(r)
        self._send(200, {})

    # endpoints: upload
    def _lfs_patterns(self, r: Repo, commit: str) -> list[str]:
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
        r = self._repo(PLURAL[kind], repo, write=True)
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
        repo_type = PLURAL[prefix.rstrip("/")] if prefix else "model"
        r = self._repo(repo_type, repo, write=True)
        body = self._body
        if body.get("operation") != "upload":
            raise HttpError(400, "the test hub only implements LFS uploads")
        objects = []
        for obj in body.get("objects", []):
            oid, size = str(obj.get("oid")), int(obj.get("size", -1))
            if not HEX64.fullmatch(oid) or size < 0:
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
            raise HttpError(403, "unknown or used upload URL")
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
            raise HttpError(400, f"uploaded content does not match oid {oid} / size {size} (got {written} bytes)")
        os.replace(tmp, target)
        self._send(200, b"", {"ETag": f'"{hashlib.md5(oid.encode()).hexdigest()}"'})

    def lfs_verify(self, query: dict, prefix: str | None = None, repo: str = "") -> None:
        self._repo(PLURAL[prefix.rstrip("/")] if prefix else "model", repo, write=True)
        oid, size = str(self._body.get("oid")), self._body.get("size")
        if not self.store.has_object(oid, size):
            raise HttpError(404, f"LFS object {oid} not found")
        self._send(200, {"success": True})

    def commit(self, query: dict, kind: str, repo: str, rev: str) -> None:
        if query.get("create_pr", ["0"])[0] not in ("0", "false", ""):
            raise HttpError(400, "the test hub does not implement pull requests (create_pr)")
        lines = [json.loads(line) for line in self._body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HttpError(400, "commit payload must start with a header line")
        header = lines[0]["value"]
        if not header.get("summary"):
            raise HttpError(400, "commit summary is empty")
        with self.store.lock:
            r = self._repo(PLURAL[kind], repo, write=True)
            user = self._token_user(required=True)
            if rev not in r.branches:
                if rev in r.commits:
                    raise HttpError(400, f"cannot commit to {rev}: not a branch")
                raise not_found_revision(rev)
            head = r.branches[rev]
            parent = header.get("parentCommit")
            if parent and r.resolve(parent) != head:
                raise HttpError(412, f"A commit has happened since {parent}: the branch is at {head}")
            tree = dict(r.tree(head))
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                path = str(value.get("path", "")).strip("/")
                if not path:
                    raise HttpError(400, f"{key}: empty path")
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
                        raise HttpError(422, f"LFS object {oid} for {path} was never uploaded")
                    size = self.store.object_path(oid).stat().st_size
                    if value.get("size") not in (None, size):
                        raise HttpError(422, f"LFS object {oid} has {size} bytes, commit says {value['size']}")
                    tree[path] = self.store.entry_for(oid, size, lfs=True)
                elif key == "deletedFile":
                    if tree.pop(path, None) is None:
                        raise HttpError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                elif key == "deletedFolder":
                    doomed = [p for p in tree if p.startswith(path + "/")]
                    if not doomed:
                        raise HttpError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
                else:
                    raise HttpError(400, f"unknown commit operation {key!r}")
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
        r = self._repo(PLURAL[prefix.rstrip("/")] if prefix else "model", repo, write=False)
        commit = r.resolve(rev)
        entry = r.tree(commit).get(path)
        if entry is None:
            raise HttpError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit})
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
                raise HttpError(416, "Range not satisfiable", headers={"Content-Range": f"bytes */{size}"})
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
ROUTES: list[tuple[str, re.Pattern[str], str]] = [
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
STREAMING = {"lfs_upload"}  # reads its own body
RAW_BODY = {"commit"}  # NDJSON
