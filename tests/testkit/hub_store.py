"""The test Hub's data: repos, commits and file contents on disk (see ``hub_server`` for the whole double)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_TYPE_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # files this large go through LFS whatever their name
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1024 * 1024

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


class HttpError(Exception):
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


def not_found_repo(repo_id: str) -> HttpError:
    return HttpError(404, f"Repository not found: {repo_id}", "RepoNotFound")


def not_found_revision(rev: str) -> HttpError:
    return HttpError(404, f"Invalid rev id: {rev}", "RevisionNotFound")


class Repo:
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
        raise not_found_revision(rev)

    def tree(self, commit: str) -> dict[str, dict[str, Any]]:
        return self.commits[commit]["tree"]

    def history(self, commit: str) -> list[str]:
        out = []
        while commit:
            out.append(commit)
            parents = self.commits[commit]["parents"]
            commit = parents[0] if parents else ""
        return out


class Store:
    """Repos and contents on disk, shared by the request threads (one lock)."""

    def __init__(self, root: Path):
        self.root = root
        self.objects = root / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)
        (root / "repos").mkdir(exist_ok=True)
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.pending_uploads: dict[str, tuple[str, int]] = {}  # upload id -> (sha256, size)
        for path in sorted((root / "repos").glob("*/*/*/repo.json")):
            data = json.loads(path.read_text())
            self.repos[(data["type"], data["id"])] = Repo(data["type"], data["id"], data["private"], data)

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
            pointer = LFS_POINTER.format(oid=sha256, size=size).encode()
            return {"sha256": sha256, "size": size, "lfs": True, "oid": _git_blob_oid(pointer)}
        return {"sha256": sha256, "size": size, "lfs": False, "oid": _git_blob_oid(self.read(sha256))}

    # repos
    def repo_dir(self, repo: Repo) -> Path:
        return self.root / "repos" / f"{repo.repo_type}s" / repo.repo_id

    def save(self, repo: Repo) -> None:
        folder = self.repo_dir(repo)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"repo.json.{secrets.token_hex(4)}.tmp"
        tmp.write_text(json.dumps(repo.to_json(), indent=1))
        os.replace(tmp, folder / "repo.json")

    def commit(
        self,
        repo: Repo,
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

    def create_repo(self, repo_type: str, repo_id: str, private: bool, author: str) -> Repo:
        repo = Repo(repo_type, repo_id, private)
        sha = self.put_bytes(DEFAULT_GITATTRIBUTES.encode())
        tree = {".gitattributes": self.entry_for(sha, len(DEFAULT_GITATTRIBUTES.encode()), lfs=False)}
        self.repos[(repo_type, repo_id)] = repo
        self.commit(repo, "main", tree, "initial commit", "", author, [])
        return repo

    def delete_repo(self, repo: Repo) -> None:
        del self.repos[(repo.repo_type, repo.repo_id)]
        shutil.rmtree(self.repo_dir(repo), ignore_errors=True)
