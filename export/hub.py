"""Publish an LRS adapter folder or an exported model folder to the Hugging Face Hub, with its model card.

:func:`push_folder` checks the folder and builds README.md from it (export/card.py) before any network call,
then creates the repo (and the branch), and uploads the folder's files plus the card in one commit. The
source folder is never modified: the card, and every JSON file that records a local path (a base model folder,
an SQLite study file, an eval command line), are uploaded from memory with those paths replaced
(:func:`publishable_files`). The token comes from the argument, else
from huggingface_hub's usual sources (HF_TOKEN, the stored login); it is never printed or logged, and every
failure becomes one :class:`HubPublishError` line without it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from urllib.parse import urljoin

from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalTokenNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from rope_adapter.errors import LrsError
from rope_adapter.files import dumps_json
from rope_adapter.records import read_json
from rope_adapter.scoring.results_table import RESULTS_TABLE_NAME

from .card import render_card
from .card_data import CardError, FolderInfo, public_json, read_folder
from .reading import SIDECAR_NAME

_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
"""NAME or ORG/NAME as the Hub spells repo ids."""

__all__ = ["HubPublishError", "absolute_url", "publishable_files", "push_folder"]

logger = logging.getLogger(__name__)

PUBLIC_JSON_FILES = frozenset(
    {"adapter_config.json", "config.json", SIDECAR_NAME, "results.json", RESULTS_TABLE_NAME, "search_report.json"}
)
"""Files whose local paths (base model folder, study storage, eval command line) are replaced when published."""


class HubPublishError(LrsError, RuntimeError):
    """Publishing failed; the message says why in one line and never contains the token."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level exception classes of the HTTP client huggingface_hub uses (httpx2, or httpx before)."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module_name in ("httpx2", "httpx"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        error = getattr(module, "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()


def _one_line(text: str, secret: str | None) -> str:
    line = " ".join(str(text).split())
    if secret:
        line = line.replace(secret, "***")
    return line


def _server_message(err: HfHubHTTPError) -> str:
    response = getattr(err, "response", None)
    if response is None:
        return ""
    message = response.headers.get("X-Error-Message") or ""
    return message if len(message) <= 200 else message[:200] + "..."


def _describe(exc: BaseException, *, endpoint: str, repo_id: str, revision: str | None) -> str:
    """One line saying what went wrong and what to do."""
    if isinstance(exc, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set: unset it (or set it to 0) to publish"
    if isinstance(exc, LocalTokenNotFoundError):
        return "no Hugging Face token: pass token=..., set HF_TOKEN, or run `hf auth login`"
    if isinstance(exc, _TRANSPORT_ERRORS):
        return f"cannot reach the Hub at {endpoint} ({type(exc).__name__}); check HF_ENDPOINT and the network"
    if isinstance(exc, HfHubHTTPError):
        response = getattr(exc, "response", None)
        status = response.status_code if response is not None else None
        detail = _server_message(exc)
        if status == 401 and not isinstance(exc, RepositoryNotFoundError):
            return (
                f"the Hub at {endpoint} rejected the token (401 Unauthorized): pass a valid write token with "
                "token=..., set HF_TOKEN, or run `hf auth login`"
            )
        if status == 403:
            return f"the token may not write to {repo_id} (403 Forbidden{': ' + detail if detail else ''})"
        if isinstance(exc, RevisionNotFoundError):
            return f"branch {revision!r} does not exist in {repo_id} and could not be created"
        if isinstance(exc, RepositoryNotFoundError):
            return f"repository {repo_id} not found at {endpoint}, or the token may not see it"
        request = getattr(response, "request", None)
        where = f" to {request.method} {request.url.path}" if request is not None else ""
        return f"the Hub at {endpoint} answered {status}{where}{': ' + detail if detail else ''}"
    if isinstance(exc, ValueError):  # e.g. README metadata refused by the Hub's validate-yaml
        return f"the Hub refused the upload: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _default_message(kind: str, num_layers: int) -> str:
    what = "LRS adapter" if kind == "adapter" else "model with LRS RoPE scaling"
    return f"Upload {what} ({num_layers} layers) with rope-adapter"


def absolute_url(url: str, endpoint: str) -> str:
    """A URL a Hub server answered, absolute: a relative one (``/org/name/commit/abc``) is joined to ``endpoint``."""
    if not url or "://" in url:
        return url
    return urljoin(endpoint.rstrip("/") + "/", url.lstrip("/"))


def publishable_files(info: FolderInfo) -> dict[str, str | bytes]:
    """``{path in repo: local file or bytes}`` of what :func:`push_folder` uploads, README.md aside.

    The JSON files rope-adapter and PEFT write (:data:`PUBLIC_JSON_FILES`) are uploaded as
    :func:`rope_adapter.export.card_data.public_json` makes them when that changes them (no local path); every
    other file as it is (a tokenizer's vocabulary may hold strings that look like paths).
    """
    out: dict[str, str | bytes] = {}
    for name in info.files:
        if name == "README.md" or name.endswith(".pyc"):
            continue
        path = info.folder / name
        out[name] = str(path)
        if name in PUBLIC_JSON_FILES:
            try:
                data = read_json(path)
            except (OSError, ValueError):
                continue  # not JSON after all: uploaded unchanged
            public = public_json(data)
            if public != data:
                text = dumps_json(public, where=path, indent=2, ensure_ascii=False)
                out[name] = (text + "\n").encode("utf-8")
    return out


def push_folder(
    folder: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Publish an LRS adapter folder or exported model folder to ``repo_id``; returns the absolute commit URL.

    The folder's README.md is (re)generated from its files (`rope_adapter.export.card.build_card`) and
    uploaded in the same commit; the folder itself is not changed. The repo is created if missing
    (``private`` applies only then); a ``revision`` names a branch, created from main if missing. A
    ``repo_id`` without a namespace goes to the token's user.

    Raises HubPublishError, with one line that never contains the token, when the folder cannot be
    published (checked before any network call), no token is found, the Hub is unreachable or refuses.
    """
    folder = Path(folder)
    if not isinstance(repo_id, str) or not _REPO_ID.fullmatch(repo_id.strip()):
        raise HubPublishError(
            f"repo id {repo_id!r} is not a Hub repo name: give NAME or ORG/NAME (letters, digits, '-', '_', '.')"
        )
    try:
        info = read_folder(folder)
        render_card(info, repo_id=repo_id)  # fail on a bad folder before touching the network
        files = publishable_files(info)
    except CardError as exc:
        raise HubPublishError(str(exc)) from None

    token = token or get_token()
    if not token:
        raise HubPublishError("no Hugging Face token: pass token=..., set HF_TOKEN, or run `hf auth login`")
    api = HfApi(token=token, library_name="rope-adapter")
    try:
        if "/" not in repo_id:
            repo_id = f"{api.whoami(token=token)['name']}/{repo_id}"
        card = render_card(info, repo_id=repo_id)
        operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=source) for name, source in files.items()]
        operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(card).encode("utf-8")))
        api.create_repo(repo_id, private=private, exist_ok=True, token=token)
        if revision is not None and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True, token=token)
        commit = api.create_commit(
            repo_id,
            operations=operations,
            commit_message=commit_message or _default_message(info.kind, info.num_layers),
            revision=revision,
            token=token,
        )
    except (HfHubHTTPError, OfflineModeIsEnabled, LocalTokenNotFoundError, ValueError, *_TRANSPORT_ERRORS) as exc:
        message = _describe(exc, endpoint=api.endpoint, repo_id=repo_id, revision=revision)
        raise HubPublishError(_one_line(f"publishing {folder} to {repo_id} failed: {message}", token)) from None
    url = absolute_url(commit.commit_url, api.endpoint)
    logger.info("published %s to %s (%s)", folder, repo_id, url)
    return url
