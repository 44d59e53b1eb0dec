"""A search over PEFT lifecycles: any sequence of wrapping a model, adding, switching and deleting adapters,
disabling them, copying the model and unloading it gives, after every step, the logits of a fresh model with the
factors then active, and an unloaded model is the plain model again (its modules, no per-layer ``forward`` or hook
of ours, its state dict's keys).

The hand-written lifecycles are in ``test_peft_lifecycle.py``; this test looks for the orders nobody wrote."""

from __future__ import annotations

import contextlib
import copy

import torch
from hypothesis import event, given
from hypothesis import strategies as st
from peft import get_peft_model
from testkit.properties import SETTINGS
from testkit.tiny_models import FreshLogits, tiny_model

from rope_adapter import LrsConfig, count_layer_hooks
from rope_adapter.layer import LrsRotaryLayer

LAYERS = 4
IDS = torch.randint(3, 250, (1, 12), generator=torch.Generator().manual_seed(2))
BASE = tiny_model("llama", num_layers=LAYERS)
VALUES = (1.0, 1.25, 1.6, 0.8)
NAMES = ("default", "a", "b")

factor_lists = st.lists(st.sampled_from(VALUES), min_size=LAYERS, max_size=LAYERS).map(tuple)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("wrap"), factor_lists),
        st.tuples(st.just("add"), st.tuples(st.sampled_from(NAMES[1:]), factor_lists)),
        st.tuples(st.just("set"), st.sampled_from(NAMES)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES[1:])),
        st.tuples(st.just("disable"), st.none()),
        st.tuples(st.just("copy"), st.sampled_from(["deepcopy", "state"])),
        st.tuples(st.just("unload"), st.none()),
    ),
    min_size=1,
    max_size=10,
)

expected = FreshLogits(BASE, IDS)
"""The logits of a fresh adapter model with given factors (memoised)."""


def assert_plain(model: torch.nn.Module) -> None:
    """``model`` is the plain model: no wrapper, no per-layer forward or hook, the base's state dict keys."""
    assert not any(isinstance(m, LrsRotaryLayer) for m in model.modules())
    assert count_layer_hooks(model) == 0
    assert all("forward" not in layer.__dict__ and not layer._forward_pre_hooks for layer in model.model.layers)
    assert list(model.state_dict()) == list(BASE.state_dict())


@SETTINGS
@given(first=factor_lists, steps=steps)
def test_no_lifecycle_leaves_a_wrong_table_or_a_trace_of_the_adapter(first, steps):
    model = copy.deepcopy(BASE)
    peft = get_peft_model(model, LrsConfig(factors=list(first)))
    adapters: dict[str, tuple[float, ...]] = {"default": first}
    active, disabled = "default", False
    for action, value in steps:
        event(action if peft is not None or action == "wrap" else "skipped")
        if action == "wrap" and peft is None:
            peft = get_peft_model(model, LrsConfig(factors=list(value)))
            adapters, active, disabled = {"default": value}, "default", False
        elif peft is None:
            continue
        elif action == "add" and value[0] not in adapters:
            peft.add_adapter(value[0], LrsConfig(factors=list(value[1])))
            adapters[value[0]] = value[1]
        elif action == "set" and value in adapters:
            peft.set_adapter(value)
            active = value
        elif action == "delete" and value in adapters and value != active:
            peft.delete_adapter(value)
            del adapters[value]
        elif action == "disable":
            disabled = not disabled
        elif action == "copy":
            if value == "deepcopy":
                peft = copy.deepcopy(peft)
            else:  # a second model made the same way, then given this one's factors
                other = get_peft_model(copy.deepcopy(BASE), LrsConfig(factors=list(adapters["default"])))
                for name in adapters:
                    if name != "default":
                        other.add_adapter(name, LrsConfig(factors=list(adapters[name])))
                other.load_state_dict(peft.state_dict())
                other.set_adapter(active)
                peft = other
            model = peft.base_model.model
        elif action == "unload":
            model = peft.unload()
            peft = None
            assert_plain(model)
        with torch.no_grad():
            if peft is None:
                got, want = model(IDS).logits, expected((1.0,) * LAYERS)
            else:
                with peft.disable_adapter() if disabled else contextlib.nullcontext():
                    got = peft(IDS).logits
                want = expected((1.0,) * LAYERS) if disabled else expected(adapters[active])
        assert torch.equal(got, want), (action, value, active, disabled, adapters)
