"""Each decoder layer's ``(cos, sin)`` for one forward, with as little work per forward as the factors allow.

The adapter's rotary wrapper runs once per forward (once per layer type on Gemma3-style models). It hands the
decoder layers an :class:`LrsPositionEmbeddings`: the base rotary's own pair, tagged with every layer's pair,
and each layer's ``forward`` (:class:`rope_adapter.layer.LayerForward`) only picks its own. What it costs:

- Layers with equal factors share one table; layers whose factor is exactly 1 use the base rotary's own output.
  Which layer uses which table (a :class:`FactorPlan`) is worked out once per set of factors, not per forward.
- The tables of all distinct factors are computed in one batched operation, ``[G, batch, tokens, rotary_dim]``.
- Memory bound: that batch is made only while ``G * batch * tokens * rotary_dim <= TABLE_BUDGET`` (2**18
  values): it keeps at most 1 MiB for cos and 1 MiB for sin in float32 (half that in bf16/fp16) until the
  forward ends, and needs at most 4 MiB of float32 while they are computed. That covers decoding (30 distinct
  factors x batch 8 x 128 channels is 30,720 values) and prompts up to 136 tokens with 30 distinct factors and
  64 channels. Beyond it (longer prompts), a layer's pair is computed when the layer runs and kept only until a
  layer with another factor runs, so at most one extra table is alive. The bound is also where batching stops
  paying on a CPU: measured with 11 and 29 distinct factors, one batch is 1.1-12x faster than one table per
  factor up to about 2**18 values, and 2.8x slower at 720k values (tables that no longer fit the core's cache).
  No table is kept between forwards.
- On an accelerator (any device but the CPU) the bound is :data:`ACCELERATOR_TABLE_BUDGET` (2**24 values): there a
  forward of a small model is bound by kernel launches, not memory, and a table per layer costs about seven
  launches a layer (measured on an H200 in bfloat16: prefill at 1k and 4k tokens 1.13-1.19x the base model's time
  with per-layer tables). The batch keeps at most 64 MiB for cos and 64 MiB for sin in float32 (half that in
  bf16/fp16) until the forward ends and needs at most 192 MiB of float32 while they are computed: 30 distinct
  factors x 4,096 tokens x 64 channels is 7.9 M values.

Under ``torch.compile`` the plan is one table per layer read from the factor tensor when the graph runs
(:func:`compiled_plan`): grouping needs the factors on the host, which a graph cannot do without breaking.

Every value is computed with the operations of transformers' rotary forward (:func:`factors.cos_sin`), so a
uniform factor equals native linear scaling and factors 1 equal the plain model, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .factors import cos_sin, double_inv_freq

TABLE_BUDGET = 1 << 18
"""Most values (``G * batch * tokens * rotary_dim``) computed in one batch per forward on the CPU, see the module
docstring."""
ACCELERATOR_TABLE_BUDGET = 1 << 24
"""The same bound on any other device (GPU, XPU, MPS...), where kernel launches, not caches, set the cost."""

BASE = 0  # a slot meaning: this layer uses the base rotary's own (cos, sin) (factor exactly 1)
OWN = -1  # a slot meaning: this rotary call does not serve the layer (another layer type); it computes its own


@dataclass(frozen=True)
class FactorPlan:
    """Which table each decoder layer uses, for one factor vector (and one layer type on Gemma3-style models).

    ``slots[l]`` is :data:`BASE`, ``g + 1`` for ``group_factors[g]``, or :data:`OWN`. ``factors`` and ``version``
    identify the tensor and the in-place version it was made from (the plan is stale once either changes).
    """

    factors: torch.Tensor
    version: int | None
    group_factors: torch.Tensor
    slots: tuple[int, ...]
    _scaled: list = field(default_factory=list, repr=False, compare=False)  # [(inv_freq, version, doubled)]

    def matches(self, factors: torch.Tensor) -> bool:
        return _unchanged(self.factors, self.version, factors)

    def scaled(self, inv_freq: torch.Tensor, layout: str) -> torch.Tensor:
        """``inv_freq / group_factors[g]`` for every group, doubled like the rotary's channels: ``[G, rotary_dim]``.
        Kept while ``inv_freq`` is the same tensor at the same in-place version (dynamic RoPE types replace it or
        update it in place, which makes it stale)."""
        tracing = compiling()
        if not tracing and self._scaled and _unchanged(self._scaled[0], self._scaled[1], inv_freq):
            return self._scaled[2]
        group_factors = self.group_factors.to(inv_freq.device)
        doubled = double_inv_freq(inv_freq[None, :] / group_factors[:, None], layout)
        if not tracing:
            self._scaled[:] = (inv_freq, _version(inv_freq), doubled)
        return doubled


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's in-place version counter; None for inference tensors, which keep none (never cached)."""
    return None if tensor.is_inference() else tensor._version


def _unchanged(seen: torch.Tensor, version: int | None, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is the tensor ``seen`` at its recorded version (never for inference tensors)."""
    return seen is tensor and version is not None and version == _version(tensor)


def make_plan(factors: torch.Tensor, layer_types: list[str] | None, layer_type: str | None) -> FactorPlan:
    """Group the layers this rotary call serves by factor (exact float32 equality); factor 1 uses the base pair."""
    groups: dict[float, int] = {}
    slots = []
    for layer, value in enumerate(factors.tolist()):
        if layer_types is not None and layer_type is not None and layer_types[layer] != layer_type:
            slots.append(OWN)
        elif value == 1.0:
            slots.append(BASE)
        else:
            slots.append(groups.setdefault(value, len(groups)) + 1)
    group_factors = torch.tensor(list(groups), dtype=torch.float32, device=factors.device)
    return FactorPlan(factors, _version(factors), group_factors, tuple(slots))


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing (our own name for it, so that tests can take the compiled path eagerly)."""
    return torch.compiler.is_compiling()


def cached_plan(
    plans: dict[str | None, FactorPlan], factors: torch.Tensor, layer_types: list[str] | None, layer_type: str | None
) -> FactorPlan:
    """The plan for ``factors`` from ``plans`` (one per layer type), made again once it is stale. Factors that
    require grad (d score / d factor, :mod:`rope_adapter.evaluate.sensitivity`) take the per-layer plan, which reads
    them from the tensor, so autograd sees every layer's factor; nothing is cached for them."""
    if compiling() or factors.requires_grad:
        return compiled_plan(factors, layer_types, layer_type)
    plan = plans.get(layer_type)
    if plan is None or not plan.matches(factors):
        plan = plans[layer_type] = make_plan(factors, layer_types, layer_type)
    return plan


def compiled_plan(factors: torch.Tensor, layer_types: list[str] | None, layer_type: str | None) -> FactorPlan:
    """One table per served layer, its factor read from the tensor when the graph runs: no host read and no version
    check, which ``torch.compile`` cannot trace (it fuses the per-layer work instead, and the per-layer picks cost nothing)."""
    served = [
        i for i in range(factors.numel()) if layer_types is None or layer_type is None or layer_types[i] == layer_type
    ]
    slots = [OWN] * factors.numel()
    for group, layer in enumerate(served):
        slots[layer] = group + 1
    return FactorPlan(factors, None, factors[served], tuple(slots))


class LrsPositionEmbeddings(tuple):
    """The base rotary's ``(cos, sin)``, carrying each decoder layer's own pair (:meth:`for_layer`)."""

    def __new__(
        cls,
        base: tuple[torch.Tensor, torch.Tensor],
        plan: FactorPlan,
        pairs: list[tuple[torch.Tensor, torch.Tensor]] | None,
        positions: torch.Tensor,
        inv_freq: torch.Tensor,
        attention_scaling: float,
        layout: str,
    ) -> LrsPositionEmbeddings:
        obj = super().__new__(cls, base)
        obj.plan = plan
        obj.pairs = pairs  # [base, group 1, ..., group G] when batched, else None (computed per layer)
        obj.positions = positions
        obj.inv_freq = inv_freq
        obj.attention_scaling = attention_scaling
        obj.layout = layout
        obj.last = (BASE, base)  # the last pair computed per layer: (slot, pair)
        return obj

    def for_layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        slot = self.plan.slots[layer]
        if self.pairs is not None and slot != OWN:
            return self.pairs[slot]
        if slot == BASE:
            return tuple(self)
        if slot != OWN and self.last[0] == slot:
            return self.last[1]
        if slot == OWN:
            return self._compute(double_inv_freq(self.inv_freq / self.plan.factors[layer], self.layout))
        pair = self._compute(self.plan.scaled(self.inv_freq, self.layout)[slot - 1])
        self.last = (slot, pair)
        return pair

    def _compute(self, doubled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return cos_sin(self.positions, doubled, self.attention_scaling, self[0].dtype)


def table_budget(device: torch.device) -> int:
    """Most values computed in one batch per forward on ``device`` (see the module docstring)."""
    return TABLE_BUDGET if device.type == "cpu" else ACCELERATOR_TABLE_BUDGET


def layer_tables(
    base: tuple[torch.Tensor, torch.Tensor],
    position_ids: torch.Tensor,
    inv_freq: torch.Tensor,
    attention_scaling: float,
    plan: FactorPlan,
    layout: str,
) -> LrsPositionEmbeddings:
    """Every layer's ``(cos, sin)`` for this forward: one batch for all distinct factors within the budget."""
    positions = position_ids[..., None].float()
    inv_freq = inv_freq.to(device=positions.device, dtype=torch.float)
    groups = plan.group_factors.numel()
    pairs = None
    if groups * positions.numel() * 2 * inv_freq.numel() <= table_budget(positions.device):
        pairs = [base]
        if groups:
            doubled = plan.scaled(inv_freq, layout)
            cos, sin = cos_sin(positions, doubled[:, None, None, :], attention_scaling, base[0].dtype)
            pairs += zip(cos.unbind(0), sin.unbind(0), strict=True)
    return LrsPositionEmbeddings(base, plan, pairs, positions, inv_freq, attention_scaling, layout)
