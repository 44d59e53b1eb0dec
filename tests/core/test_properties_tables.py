"""A search for stale tables: any sequence of the changes a user makes to an adapter model (new factors in place,
a state dict loaded in place, another adapter, the adapter disabled, inference mode or not, the batched or the
per-layer path) leaves the logits bit for bit those of a model freshly built with the factors then active.

The adapter keeps work from one forward to the next (which layer uses which table, the scaled frequencies), keyed on
tensors and their in-place versions; every way a key can go stale without the cache noticing is a wrong answer that
no error reports. The hand-written cases are in ``test_tables.py``; this test looks for the ones nobody wrote."""

from __future__ import annotations

import contextlib
import copy

import torch
from hypothesis import given
from hypothesis import strategies as st
from peft import get_peft_model
from testkit.properties import FEW
from testkit.tiny_models import FreshLogits, tiny_model

import rope_adapter
from rope_adapter import LrsConfig, tables
from rope_adapter.layer import LrsRotaryLayer

LAYERS = 4
IDS = torch.randint(3, 250, (1, 12), generator=torch.Generator().manual_seed(1))
BASE = tiny_model("llama", num_layers=LAYERS)
VALUES = (1.0, 1.25, 1.6, 0.8)  # factor 1 (the base pair) and values that repeat across layers (shared tables)

factor_lists = st.lists(st.sampled_from(VALUES), min_size=LAYERS, max_size=LAYERS)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("set_factors"), factor_lists),
        st.tuples(st.just("load_state_dict"), factor_lists),
        st.tuples(st.just("switch"), st.sampled_from(["default", "other"])),
        st.tuples(st.just("disable"), st.none()),
        st.tuples(st.just("inference_mode"), st.booleans()),
        st.tuples(st.just("per_layer"), st.booleans()),
    ),
    min_size=1,
    max_size=8,
)

expected = FreshLogits(BASE, IDS)
"""The logits of a fresh adapter model with given factors (memoised)."""


@FEW
@given(start_in_inference_mode=st.booleans(), steps=steps)
def test_no_sequence_of_changes_leaves_a_stale_table(start_in_inference_mode, steps, monkeypatch):
    """After every step the model's logits equal a fresh model's with the active factors (or the base's when
    disabled), whether the model was made under inference mode or not."""
    budget = tables.TABLE_BUDGET
    mode = torch.inference_mode if start_in_inference_mode else contextlib.nullcontext
    with mode():
        model = get_peft_model(copy.deepcopy(BASE), LrsConfig(factors=[1.25, 1.6, 1.0, 1.25]))
        model.add_adapter("other", LrsConfig(factors=[0.8, 0.8, 1.6, 1.0]))
    active = {"default": (1.25, 1.6, 1.0, 1.25), "other": (0.8, 0.8, 1.6, 1.0)}
    name, inference, disabled = "default", start_in_inference_mode, False
    wrapper = next(m for m in model.modules() if isinstance(m, LrsRotaryLayer))
    for action, value in steps:
        with torch.inference_mode() if inference else torch.no_grad():
            if action == "set_factors":
                rope_adapter.set_factors(model, list(value), adapter_name=name)
                active[name] = tuple(value)
            elif action == "load_state_dict":
                wrapper.load_state_dict({f"lrs_factors.{name}": torch.tensor(value)}, strict=False)
                active[name] = tuple(value)
            elif action == "switch":
                name = value
                model.set_adapter(name)
            elif action == "disable":
                disabled = not disabled
            elif action == "inference_mode":
                inference = value
            else:
                monkeypatch.setattr(tables, "TABLE_BUDGET", 0 if value else budget)
            with model.disable_adapter() if disabled else contextlib.nullcontext():
                got = model(IDS).logits
        want = expected((1.0,) * LAYERS) if disabled else expected(active[name])
        assert torch.equal(got, want), (action, value, name, disabled, inference)
