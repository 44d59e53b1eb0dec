"""Small key-value retrieval files in Lost in the Middle's format (``ordered_kv_records``), made in the test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_kv_file(path: Path, num_records: int, num_pairs: int, seed: int = 0) -> Path:
    """``num_records`` lines of ``num_pairs`` distinct keys each (the gold fields empty: the task picks the gold)."""
    rng = np.random.default_rng(seed)
    rows = [
        {"ordered_kv_records": [[f"k{i}-{j}-{rng.integers(1e9)}", f"v{i}-{j}"] for j in range(num_pairs)], "key": "", "value": ""}
        for i in range(num_records)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
