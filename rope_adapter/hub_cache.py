"""Where the Hugging Face Hub client keeps its local cache, and whether it may go online (no Hub code imported)."""

from __future__ import annotations

import os
from pathlib import Path


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE is set to a true value."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hf_hub_cache() -> Path:
    """The Hub client's cache folder (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(variable, "").strip()
        if value:
            return Path(value).expanduser()
    hf_home = os.environ.get("HF_HOME", "").strip()
    if hf_home:
        return Path(hf_home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def hub_copy_cached(repo_id: str) -> bool:
    """True when a snapshot of the repo with a config.json is in the local cache."""
    snapshots = hf_hub_cache() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    return any(snapshots.glob("*/config.json"))
