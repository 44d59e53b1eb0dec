"""Hand edits of a saved adapter's files, for tests of what loading refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def edit_adapter_config(folder: Path, **changes: Any) -> None:
    """Set keys of ``folder``'s adapter_config.json (``None`` writes JSON null), keeping the others."""
    path = folder / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
