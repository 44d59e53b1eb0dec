"""The logit margins behind the ``soft`` score: computed in the same pass as the log-probs, equal to a plain full
forward's, > 0 exactly when teacher-forced exact; the ``soft`` search score and its held-out verdict in accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from testkit.samples import mixed_samples
from testkit.searches import small
from testkit.tiny_models import byte_tokenizer, tiny_model

from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.search import run_search
from rope_adapter.search.objective import soft_score


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_margins_are_the_gold_logit_minus_the_best_other(arch):
    tokenizer = byte_tokenizer()
    model = tiny_model(arch, num_layers=2)
    task = prepare(mixed_samples(), tokenizer)
    shared = token_logprobs(model, task, batch_size=2, max_batch_tokens=64)
    separate = token_logprobs(model, task, shared_prefix=False)
    for a, b in zip(shared.margins, separate.margins, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    with torch.no_grad():  # the definition, by hand, on one sample's full sequence
        i = 0
        ids = torch.tensor([task.full_ids[i]])
        start = task.target_start[i]
        logits = model(input_ids=ids).logits[0, start - 1 : -1].float()
        targets = ids[0, start:]
        gold = logits[torch.arange(len(targets)), targets]
        other = logits.clone()
        other[torch.arange(len(targets)), targets] = -torch.inf
        expected = (gold - other.max(-1).values).double().numpy()
    np.testing.assert_allclose(separate.margins[i], expected, atol=1e-4, rtol=0)
    assert ((shared.min_margin() > 0) == shared.exact()).all()


def test_soft_score_is_a_smoothed_accuracy():
    m = np.array([-50.0, -1.0, 0.0, 1.0, 50.0])
    s = soft_score(m)
    assert s[2] == 0.5 and (np.diff(s) > 0).all() and s[0] < 1e-20 and s[-1] == 1.0
    sharp = soft_score(m, temperature=1e-3)
    np.testing.assert_allclose(sharp[[0, 1, 3, 4]], [0.0, 0.0, 1.0, 1.0], atol=1e-20)


def test_a_soft_search_reports_its_verdict_in_accuracy(tmp_path):
    folder = tmp_path / "model"
    tiny_model("llama", num_layers=4).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    settings = small(tmp_path / "out", folder, score="soft", trials=6)
    result = run_search(settings)
    report = json.loads((Path(settings.out) / "search_report.json").read_text())
    scored = [t for t in report["trials"] if t.get("evaluated")]
    assert scored and all(0.0 < v <= 1.0 for t in scored for v in t["by_position"].values())
    assert report["holdout"]["score"] == "answer" and report["holdout"]["search_score"] == "soft"
    found = report["holdout"]["configs"]["found"]
    # the held-out score is the answer score: teacher-forced accuracy plus a tie-break below 0.1
    for p, v in found["by_position"].items():
        assert abs(v - found["tf_accuracy_by_position"][p]) <= 0.1
    assert result.report["task"]["score"] == "soft"
