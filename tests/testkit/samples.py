"""Samples and comparisons shared by the scoring tests."""

from __future__ import annotations

import numpy as np

from rope_adapter.scoring.logprobs import TokenLogprobs
from rope_adapter.scoring.tasks import KVRetrievalTask, Sample

ATOL = 1e-4


def mixed_samples() -> list[Sample]:
    """KV samples (one shared prefix per record) plus hand-made ones of different lengths (padding both ways)."""
    samples = KVRetrievalTask(num_records=2, num_pairs=3, positions=[0, 2], seed=3, alt_target_prefixes=()).samples()
    samples += [
        Sample(prefix="Short context. ", query="Q: one?", answers=["x"], position=0, record_id="a", target=" yes"),
        Sample(
            prefix="Short context. ", query="Q: a longer two?", answers=["y"], position=1, record_id="a", target=" no!"
        ),
        Sample(prefix="A much longer context " * 6, query="Q?", answers=["z"], position=0, record_id="b", target=" z"),
    ]
    return samples


def assert_same(a: TokenLogprobs, b: TokenLogprobs) -> None:
    assert len(a.values) == len(b.values)
    for x, y in zip(a.values, b.values, strict=True):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, atol=ATOL, rtol=0)
