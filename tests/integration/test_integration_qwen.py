"""The adapter and the teacher-forced accuracy on the real Qwen2.5-Coder-0.5B-Instruct (six PyPI wheels)."""

from __future__ import annotations

import pytest
import torch
from peft import get_peft_model

import rope_adapter
from rope_adapter import LrsConfig
from rope_adapter.scoring.generation import greedy_accuracy
from rope_adapter.scoring.shared_prefix import prepare, token_logprobs
from rope_adapter.scoring.tasks import KVRetrievalTask

pytestmark = pytest.mark.integration


def test_qwen_adapter_and_teacher_forced_accuracy(qwen):
    base, tokenizer = qwen
    assert type(base).__name__ == "Qwen2ForCausalLM" and base.config.num_hidden_layers == 24
    task = KVRetrievalTask(num_records=1, num_pairs=10, positions=[0, 9], seed=4)
    prepared = prepare(task.samples(), tokenizer)
    ids = torch.tensor([prepared.prompt_ids[0]])
    with torch.inference_mode():
        plain = base(ids).logits
    model = get_peft_model(base, LrsConfig(factors=None))  # wraps the session's model: unloaded at the end
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, plain)  # all ones: exactly the base model
    accuracy = {}
    for factors in (None, [1.0 + 0.5 * i / 23 for i in range(24)]):
        if factors is not None:
            rope_adapter.set_factors(model, factors)
        with torch.inference_mode():
            exact = token_logprobs(model, prepared).exact()
            greedy = greedy_accuracy(model, prepared, task.is_correct)
        # the verdict of one teacher-forced pass is the benchmark's verdict on the greedy answer
        assert exact.tolist() == greedy.correct.tolist(), greedy.predictions
        accuracy["base" if factors is None else "scaled"] = greedy.accuracy()
    assert accuracy["base"] > 0  # Qwen answers at 10 pairs
    model.unload()
