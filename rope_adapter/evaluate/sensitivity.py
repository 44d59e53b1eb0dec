"""Per-layer sensitivity of the whole-answer score to the RoPE factors: d score / d log s_l, by autograd.

The factors enter the model only through ``inv_freq / s_l`` (:class:`rope_adapter.LrsRotaryLayer`), so the score
(the mean log-probability of the whole gold answer, the search's default) is differentiable in them. At a point
``s`` (all ones: the base model) we write ``s_l = s_l * exp(u_l)`` with ``u = 0`` and take the gradient in ``u``:
d score / d log s_l, one number per decoder layer and sample. Samples of one record share its context, so the
interval of a layer's mean gradient is a t interval over records (the record means), not over samples.

A positive value means a slightly larger factor on that layer raises the gold answer's log-probability on these
samples; it is a local slope at ``s``, not a promise of a gain at a finite step (issue 10 measured a gradient
ascent that made held-out records worse). Cost: one forward and one backward pass per sample, with the full
sequence (no shared-prefix cache), plus one shared-prefix pass to pick each sample's answer form.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from peft import get_peft_model
from torch import nn
from tqdm.auto import tqdm

from rope_adapter import LrsConfig, LrsRotaryLayer, validate_factors
from rope_adapter.scoring.intervals import IntervalEntry, mean_interval
from rope_adapter.scoring.shared_prefix import TokenizedTask, token_logprobs
from rope_adapter.scoring.variants import quiet_peft, shared_weight_copy

ADAPTER = "sensitivity"


class LayerSlope(IntervalEntry):
    """One layer's mean d score / d log s_l with its 95 % t interval over records."""

    layer: int


class SensitivityRecord(TypedDict):
    """A :class:`Sensitivity` as sensitivity.json holds it (:meth:`Sensitivity.to_dict`)."""

    quantity: str
    factors: list[float]
    samples: int
    records: int
    score_mean: float
    tf_accuracy: float
    by_layer: list[LayerSlope]
    by_position: dict[str, list[float]]  # gold position -> mean gradient per layer
    per_sample: list[list[float]]  # [samples][layers]
    positions: list[int]
    record_ids: list[str]


@dataclass
class Sensitivity:
    """d score / d log s_l per sample and layer, at ``factors``; score = mean log-prob of the whole gold answer."""

    factors: list[float]
    gradients: np.ndarray  # [samples, layers]
    scores: np.ndarray  # [samples], the whole-answer mean log-prob at ``factors``
    exact: np.ndarray  # [samples], teacher-forced exact match at ``factors``
    positions: np.ndarray  # [samples], gold positions
    records: list[str]  # [samples], record ids

    def record_means(self) -> tuple[list[str], np.ndarray]:
        """The records in first-seen order and each record's mean gradient ``[records, layers]``."""
        order = list(dict.fromkeys(self.records))
        index = np.array([order.index(r) for r in self.records])
        return order, np.stack([self.gradients[index == i].mean(0) for i in range(len(order))])

    def by_layer(self) -> list[LayerSlope]:
        """Per layer: the mean gradient and its 95 % t interval over records."""
        _, means = self.record_means()
        return [{"layer": layer, **mean_interval(means[:, layer]).to_dict()} for layer in range(means.shape[1])]

    def by_position(self) -> dict[int, list[float]]:
        """``{gold position: mean gradient per layer}``."""
        return {int(p): self.gradients[self.positions == p].mean(0).tolist() for p in np.unique(self.positions)}

    def to_dict(self) -> SensitivityRecord:
        return {
            "quantity": "d mean_logprob(whole gold answer) / d log s_l",
            "factors": self.factors,
            "samples": int(len(self.scores)),
            "records": len(set(self.records)),
            "score_mean": float(self.scores.mean()),
            "tf_accuracy": float(self.exact.mean()),
            "by_layer": self.by_layer(),
            "by_position": {str(p): v for p, v in self.by_position().items()},
            "per_sample": self.gradients.tolist(),
            "positions": self.positions.tolist(),
            "record_ids": list(self.records),
        }


@contextmanager
def _factor_model(model: nn.Module, factors: Sequence[float]) -> Iterator[tuple[nn.Module, Any]]:
    """An LRS copy of ``model`` (shared weights); yields (copy, ``attach``): ``attach()`` makes the copy's factors
    ``factors * exp(u)`` for a fresh ``u = 0`` that requires grad, and returns ``u`` (once per backward pass).

    ``model`` is left as it was: the copy shares its parameters, whose ``requires_grad`` flags are restored."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        with quiet_peft():
            work = get_peft_model(shared_weight_copy(model), LrsConfig(factors=list(factors)), adapter_name=ADAPTER)
        work.eval()
        for p in work.parameters():
            p.requires_grad_(False)
        layers = [m for m in work.modules() if isinstance(m, LrsRotaryLayer)]
        if not layers:
            raise RuntimeError("internal error: the LRS copy has no rotary layer")
        point = layers[0].lrs_factors[ADAPTER].detach().clone()

        def attach() -> torch.Tensor:
            u = torch.zeros_like(point, requires_grad=True)
            for layer in layers:  # each forward reads the factors afresh, now a function of u
                layer.lrs_factors._buffers[ADAPTER] = point * u.exp()
            return u

        yield work, attach
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _answer_gradient(model: nn.Module, ids: list[int], start: int, u: torch.Tensor) -> tuple[np.ndarray, float]:
    """Gradient in ``u`` of the mean log-prob of ``ids[start:]`` given what comes before; and that score."""
    device = u.device
    tensor = torch.tensor([ids], device=device)
    keep = tensor.shape[1] - start + 1  # logits at start-1 .. end-1; the last one is dropped
    logits = model(input_ids=tensor, use_cache=False, logits_to_keep=keep).logits[0, :-1].float()
    targets = tensor[0, start:]
    score = logits.log_softmax(-1)[torch.arange(len(targets), device=device), targets].mean()
    (grad,) = torch.autograd.grad(score, u)
    return grad.detach().double().cpu().numpy(), float(score.detach())


def layer_sensitivity(
    model: nn.Module,
    task: TokenizedTask,
    factors: Sequence[float] | None = None,
    *,
    progress: bool = False,
) -> Sensitivity:
    """d (whole-answer mean log-prob) / d log s_l for every sample of ``task`` and every layer, at ``factors``.

    Args:
        model: a transformers causal LM without an adapter (it is not changed; an LRS copy sharing its weights
            is made).
        task: from :func:`rope_adapter.scoring.prepare`; each sample's answer form is the one the search scores
            (the form greedy decoding writes, else the most probable).
        factors: the point, one factor per decoder layer (default: all ones, the base model).
    """
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    num_layers = int(text.num_hidden_layers)
    point = validate_factors([1.0] * num_layers if factors is None else list(factors), num_layers)
    with _factor_model(model, point) as (work, attach):
        scored = token_logprobs(work, task)  # picks each sample's answer form at this point
        rows = scored.rows if scored.rows is not None else list(range(len(task)))
        grads, scores = [], []
        for row in tqdm(rows, desc="d score / d log s", disable=not progress):
            grad, score = _answer_gradient(work, task.full_ids[row], task.target_start[row], attach())
            grads.append(grad)
            scores.append(score)
    return Sensitivity(
        factors=point,
        gradients=np.stack(grads),
        scores=np.array(scores),
        exact=scored.exact(),
        positions=task.positions,
        records=[s.record_id for s in task.samples],
    )
