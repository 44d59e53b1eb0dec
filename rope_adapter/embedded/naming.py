"""Which embedded model a name loads: its alias (any case), or its Hub id when the Hub cannot serve it (offline, or
no snapshot in the local Hugging Face cache). One rule for :func:`~rope_adapter.embedded.loading.resolve_model_path`,
which loads the converted copy, and :func:`rope_adapter.identity.model_identity`, which names what is loaded.
Imports neither torch nor transformers."""

from __future__ import annotations

import os
from pathlib import Path

from .cache import hub_copy_cached, hub_offline
from .registry import EMBEDDED_MODELS, EmbeddedModel


def embedded_source(name_or_path: str | os.PathLike[str]) -> tuple[EmbeddedModel, str] | None:
    """(the embedded model, why) when ``name_or_path`` loads an embedded model's converted copy, else None. An
    existing local path never does; a Hub id does only when the Hub cannot serve it (``why`` says which)."""
    name = os.fspath(name_or_path)
    if Path(name).expanduser().exists():
        return None
    key = name.casefold()
    spec = EMBEDDED_MODELS.get(key)
    if spec is not None:
        return spec, "alias"
    for spec in EMBEDDED_MODELS.values():
        if key == spec.hub_id.casefold():
            if hub_offline():
                return spec, "HF_HUB_OFFLINE is set"
            if not hub_copy_cached(spec.hub_id):
                return spec, "it is not in the local Hugging Face cache"
    return None
