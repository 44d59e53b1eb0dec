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

Repos, commits and file contents (``hub_store``) live on disk under ``root`` (a temporary directory unless given):
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

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from testkit.hub_handler import HubHandler, HubHTTPServer
from testkit.hub_store import Repo, Store

__all__ = ["HubTestServer", "hub_for_test"]


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
        self.store = Store(self.root)
        self.requests: list[tuple[str, str, int]] = []  # (method, path without query, status)
        self.errors: list[str] = []  # tracebacks of requests the double failed on (its own bugs)
        self._server: HubHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> HubTestServer:
        server = HubHTTPServer(("127.0.0.1", 0), HubHandler)
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
    def _get_repo(self, repo_id: str, repo_type: str = "model") -> Repo:
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
