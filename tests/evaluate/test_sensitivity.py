"""Per-layer sensitivity d score / d log s_l (rope_adapter/evaluate/sensitivity.py) against finite differences of the real score."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter import LrsConfig, count_layer_hooks
from rope_adapter.evaluate.sensitivity import layer_sensitivity
from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.scoring.tasks import KVRetrievalTask


def kv_task(records: int = 2):
    samples = KVRetrievalTask(num_records=records, num_pairs=3, positions=[0, 2]).samples()
    return prepare(samples, byte_tokenizer())


def whole_answer_scores(model, task, factors) -> np.ndarray:
    """The score the search uses (mean log-prob of the whole answer, chosen form) at ``factors``."""
    work = get_peft_model(copy.deepcopy(model), LrsConfig(factors=list(factors)))
    return token_logprobs(work.eval(), task).mean()


@pytest.mark.parametrize(
    ("arch", "point"),
    [
        ("llama", None),
        ("llama", [0.8, 1.0, 1.3]),
        ("gemma3_text", [1.2, 0.9, 1.1]),
    ],  # gemma3: one rotary, two layer types
)
def test_gradient_matches_central_differences_in_log_factor(arch, point):
    torch.manual_seed(0)
    model = tiny_model(arch, num_layers=3).double()
    task = kv_task()
    got = layer_sensitivity(model, task, point)
    base = np.ones(3) if point is None else np.array(point)

    def central(h: float, layer: int) -> np.ndarray:
        up, down = base.copy(), base.copy()
        up[layer] *= np.exp(h)
        down[layer] *= np.exp(-h)
        return (whole_answer_scores(model, task, up) - whole_answer_scores(model, task, down)) / (2 * h)

    # Richardson's extrapolation of central differences (error O(h^4)). The rotary tables are float32 even in a
    # float64 model, so each score carries ~1e-7 relative rounding, ~1e-4 in a quotient at this step (seen up
    # to 0.6 % of the largest slope); a gradient on the wrong layer or a missing factor is off by the slope itself
    h = 1e-3
    numeric = np.stack([(4 * central(h / 2, layer) - central(h, layer)) / 3 for layer in range(3)], axis=1)
    scale = np.abs(got.gradients).max()
    np.testing.assert_allclose(got.gradients, numeric, rtol=0, atol=2e-2 * scale)
    np.testing.assert_allclose(got.scores, whole_answer_scores(model, task, base), rtol=1e-6)
    assert np.abs(got.gradients).max() > 1e-4  # RoPE matters in the tiny model: the check is not 0 == 0


def test_the_model_is_left_as_it_was():
    model = tiny_model("qwen2", num_layers=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [p.requires_grad for p in model.parameters()]
    layer_sensitivity(model, kv_task(1))
    assert count_layer_hooks(model) == 0
    assert [p.requires_grad for p in model.parameters()] == flags
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not any(p.grad is not None for p in model.parameters())


def test_intervals_are_over_records_not_samples():
    model = tiny_model("llama", num_layers=2)
    result = layer_sensitivity(model, kv_task(3))
    records, means = result.record_means()
    assert len(records) == 3 and means.shape == (3, 2)
    rows = result.by_layer()
    assert [r["n"] for r in rows] == [3, 3]
    for layer, row in enumerate(rows):
        assert row["mean"] == pytest.approx(means[:, layer].mean())
        assert row["ci_low"] < row["mean"] < row["ci_high"]
    data = result.to_dict()
    assert data["samples"] == 6 and data["records"] == 3 and set(data["by_position"]) == {"0", "2"}


def test_wrong_number_of_factors_is_refused_before_any_pass():
    from rope_adapter import InvalidFactorsError

    with pytest.raises(InvalidFactorsError):
        layer_sensitivity(tiny_model("llama", num_layers=2), kv_task(1), [1.0, 1.0, 1.0])
