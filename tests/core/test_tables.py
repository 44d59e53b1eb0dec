"""Each layer's (cos, sin) at the least cost per forward: shared between equal factors, batched within the memory
bound, per layer beyond it, and never stale after the factors, the adapter, the dtype or the frequencies change."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import ARCHITECTURES, byte_tokenizer, capture_position_embeddings, tiny_model

import rope_adapter
from rope_adapter import LrsConfig, tables
from rope_adapter.layer import LrsRotaryLayer

FACTORS = [1.0, 1.6, 1.6, 2.5, 1.0, 1.6]  # factor 1 twice, a factor shared by three layers, one on its own
IDS = torch.randint(3, 250, (2, 40), generator=torch.Generator().manual_seed(0))


@pytest.fixture(params=["batched", "per_layer", "compiled"])
def path(request, monkeypatch) -> str:
    """Run a test on each path: all tables in one batch, each layer's pair when the layer runs (budget 0), or the
    path torch.compile traces (one table per layer, no cached plan), taken eagerly."""
    if request.param == "per_layer":
        monkeypatch.setattr(tables, "TABLE_BUDGET", 0)
    if request.param == "compiled":
        monkeypatch.setattr(tables, "compiling", lambda: True)
    return request.param


def adapted(base, factors=FACTORS, **kwargs):
    return get_peft_model(copy.deepcopy(base), LrsConfig(factors=factors), **kwargs)


def wrapper(model) -> LrsRotaryLayer:
    return next(m for m in model.modules() if isinstance(m, LrsRotaryLayer))


def received(model, ids=IDS) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Run ``model`` on ``ids``; return the (cos, sin) each decoder layer really passed on to its attention."""
    with capture_position_embeddings(rope_adapter.find_rope_site(model).layers) as seen, torch.no_grad():
        model(ids)
    return seen


def native_rotary(base, factor: float) -> torch.nn.Module:
    """The base model's rotary module under transformers' own linear scaling with ``factor``."""
    config = copy.deepcopy(base.config)
    params = config.rope_parameters
    for p in params.values() if all(isinstance(v, dict) for v in params.values()) else [params]:
        p.update(rope_type="linear", factor=factor)
    return type(rope_adapter.find_rope_site(base).rotary)(config=config)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text", "gpt_neox"])
def test_each_layer_gets_native_linear_scaling_with_its_factor_bit_for_bit(arch, path):
    base = tiny_model(arch, num_layers=len(FACTORS))
    seen = received(adapted(base))
    layer_types = getattr(base.config, "layer_types", None)
    x = torch.zeros(1, IDS.shape[1], 1)
    positions = torch.arange(IDS.shape[1])[None]
    for layer, factor in enumerate(FACTORS):
        rotary = native_rotary(base, factor)
        want = rotary(x, positions) if layer_types is None else rotary(x, positions, layer_types[layer])
        assert all(torch.equal(got, w) for got, w in zip(seen[layer], want, strict=True)), (layer, factor)


def test_equal_factors_share_one_table_and_factor_one_uses_the_base_pair():
    base = tiny_model("llama", num_layers=len(FACTORS))
    seen = received(adapted(base))
    cos = {layer: pair[0] for layer, pair in seen.items()}
    assert cos[1] is cos[2] is cos[5]  # 1.6 three times: one table
    assert cos[0] is cos[4]  # factor 1: the base rotary's own pair
    assert len({id(t) for t in cos.values()}) == 3  # 1.0, 1.6, 2.5
    plain = rope_adapter.find_rope_site(base).rotary(torch.zeros(1), torch.arange(IDS.shape[1])[None])
    assert torch.equal(cos[0], plain[0])


def test_per_layer_path_computes_a_shared_table_once_per_run_of_equal_factors(monkeypatch):
    """Beyond the bound a pair is computed when its layer runs and kept only until another factor's layer runs."""
    monkeypatch.setattr(tables, "TABLE_BUDGET", 0)
    computed = []
    original = tables.LrsPositionEmbeddings._compute
    monkeypatch.setattr(
        tables.LrsPositionEmbeddings, "_compute", lambda self, d: computed.append(d) or original(self, d)
    )
    seen = received(adapted(tiny_model("llama", num_layers=len(FACTORS))))
    assert len(computed) == 3  # layers 1-2 (1.6), 3 (2.5), 5 (1.6 again); layers 0 and 4 take the base pair
    assert seen[1][0] is seen[2][0] and seen[2][0] is not seen[5][0]


def test_the_batch_is_made_exactly_up_to_the_memory_bound(monkeypatch):
    model = adapted(tiny_model("llama", num_layers=len(FACTORS)))
    outputs = []
    wrapper(model).register_forward_hook(lambda m, a, out: outputs.append(out))
    groups, rotary_dim = 2, 16  # 1.6 and 2.5; head_dim 16
    values = groups * IDS.shape[1] * rotary_dim  # position_ids are [1, tokens] for an unpadded batch
    for budget, batched in ((values, True), (values - 1, False)):
        monkeypatch.setattr(tables, "TABLE_BUDGET", budget)
        with torch.no_grad():
            model(IDS)
        assert (outputs[-1].pairs is not None) == batched, budget


def test_an_accelerator_batches_up_to_its_own_larger_bound():
    """Off the CPU the batch bound is ACCELERATOR_TABLE_BUDGET: a prompt that takes the per-layer path on the CPU is
    batched there (meta tensors stand in for a GPU's: the decision depends on the device type alone)."""
    assert tables.table_budget(torch.device("cpu")) == tables.TABLE_BUDGET
    for device in ("cuda", "cuda:1", "xpu", "mps", "meta"):
        assert tables.table_budget(torch.device(device)) == tables.ACCELERATOR_TABLE_BUDGET
    plan = tables.make_plan(torch.tensor(FACTORS), None, None)  # 2 groups: 1.6 and 2.5
    tokens = tables.TABLE_BUDGET // (2 * 16) + 1  # one token over the CPU bound at rotary_dim 16
    for device, batched in (("cpu", False), ("meta", True)):
        positions = torch.zeros(1, tokens, dtype=torch.long, device=device)
        base = (torch.zeros(1, tokens, 16, device=device), torch.zeros(1, tokens, 16, device=device))
        out = tables.layer_tables(base, positions, torch.ones(8, device=device), 1.0, plan, "half")
        assert (out.pairs is not None) == batched, device


def test_gemma3_computes_only_the_tables_of_the_layer_type_it_serves():
    base = tiny_model("gemma3_text", num_layers=len(FACTORS))  # layers 1, 3, 5 full attention, 0, 2, 4 sliding
    model = adapted(base)
    outputs = []
    wrapper(model).register_forward_hook(lambda m, a, out: outputs.append(out))
    with torch.no_grad():
        model(IDS)
    served = {tuple(i for i, slot in enumerate(out.plan.slots) if slot != tables.OWN): out for out in outputs}
    assert sorted(served) == [(0, 2, 4), (1, 3, 5)]
    assert len(served[0, 2, 4].pairs) == 1 + 1  # sliding layers: factors 1.0, 1.6, 1.0 (the base pair and 1.6)
    assert len(served[1, 3, 5].pairs) == 1 + 2  # full attention layers: factors 1.6, 2.5, 1.6


def test_tables_follow_set_factors_load_state_dict_adapters_and_dtype(path):
    base = tiny_model("llama", num_layers=len(FACTORS))
    other = [2.0, 1.0, 1.3, 1.3, 2.0, 1.1]

    def logits(model):
        with torch.no_grad():
            return model(IDS).logits

    want, want_other = logits(adapted(base)), logits(adapted(base, other))
    model = adapted(base)
    assert torch.equal(logits(model), want)
    rope_adapter.set_factors(model, other)
    assert torch.equal(logits(model), want_other)
    wrapper(model).load_state_dict({"lrs_factors.default": torch.tensor(FACTORS)}, strict=False)  # in place
    assert torch.equal(logits(model), want)

    model.add_adapter("b", LrsConfig(factors=other))
    model.set_adapter("b")
    assert torch.equal(logits(model), want_other)
    model.set_adapter("default")
    assert torch.equal(logits(model), want)
    with model.disable_adapter():
        assert torch.equal(logits(model), logits(base))
    model.delete_adapter("b")
    model.add_adapter("b", LrsConfig(factors=[1.2] * len(FACTORS)))  # a new tensor under the same name
    model.set_adapter("b")
    assert torch.equal(logits(model), logits(adapted(base, 1.2)))

    model.set_adapter("default")
    model.to(torch.bfloat16)
    assert torch.equal(logits(model), logits(adapted(copy.deepcopy(base).to(torch.bfloat16))))


def test_a_model_made_in_inference_mode_keeps_its_plan_and_no_stale_one(monkeypatch):
    """Tensors made in inference mode keep no version counter: the adapter's factors become a normal tensor at the
    first forward, so the plan is made once (no host read of the factors per forward, a device sync on a GPU) and
    every later in-place change (set_factors, load_state_dict, a cast) is still seen."""
    made = []
    make_plan = tables.make_plan
    monkeypatch.setattr(tables, "make_plan", lambda *args: made.append(1) or make_plan(*args))
    base = tiny_model("llama", num_layers=len(FACTORS))
    other = [2.0, 1.0, 1.3, 1.3, 2.0, 1.1]
    with torch.no_grad():
        want, want_other = adapted(base)(IDS).logits, adapted(base, other)(IDS).logits
    made.clear()
    with torch.inference_mode():
        model = adapted(base)
        assert torch.equal(model(IDS).logits, want)
        for _ in range(3):
            model(IDS)
        assert len(made) == 1
        rope_adapter.set_factors(model, 1.0)
        assert torch.equal(model(IDS).logits, base(IDS).logits)
        wrapper(model).load_state_dict({"lrs_factors.default": torch.tensor(other)}, strict=False)
        assert torch.equal(model(IDS).logits, want_other)
        model.to(torch.float64)  # a cast made in inference mode (the factors stay float32)
        model.to(torch.float32)
        assert torch.equal(model(IDS).logits, want_other)
    assert len(made) == 3  # first forward, set_factors, load_state_dict (the casts left the factors as they were)
    assert torch.equal(adapted(base)(IDS).logits, want)


@pytest.mark.parametrize(
    "params",
    [
        {"rope_type": "dynamic", "factor": 2.0},
        {
            "rope_type": "longrope",
            "short_factor": [1.0 + 0.1 * i for i in range(8)],
            "long_factor": [2.0 + 0.2 * i for i in range(8)],
            "original_max_position_embeddings": 64,
        },
    ],
    ids=["dynamic", "longrope"],
)
def test_frequencies_a_dynamic_rope_type_changes_are_never_stale(params):
    """Dynamic NTK replaces inv_freq beyond its length, LongRoPE updates it in place: short, long, short again."""
    rope = {"rope_theta": 100.0, **params}
    base = tiny_model("llama", num_layers=len(FACTORS), rope_parameters=rope, max_position_embeddings=64)
    model = adapted(base)
    for length in (40, 100, 40):
        ids = torch.randint(3, 250, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            assert torch.equal(model(ids).logits, adapted(base)(ids).logits), length


def test_generate_with_a_kv_cache_equals_generate_without_on_the_per_layer_path(monkeypatch):
    """The batched path's generate is checked in test_peft_lifecycle.py."""
    monkeypatch.setattr(tables, "TABLE_BUDGET", 0)
    tok = byte_tokenizer()
    model = adapted(tiny_model("llama", num_layers=len(FACTORS)))
    batch = tok(["The key is 4711 and", "x"], return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    cached = model.generate(**batch, **kwargs)
    assert torch.equal(cached, model.generate(**batch, use_cache=False, **kwargs))


@pytest.mark.parametrize(
    ("arch", "made_in_inference_mode"),
    [*((arch, False) for arch in ARCHITECTURES), ("llama", True)],
)
def test_torch_compile_traces_the_adapter_model_in_one_graph(arch, made_in_inference_mode):
    """No graph break anywhere in the adapter's path (``fullgraph=True`` raises at the first one) on every tiny
    architecture, whatever mode the model was made in, and the compiled logits are the eager ones. Dynamo's
    ``eager`` backend: the tracing is what is checked, not a compiler."""
    base = tiny_model(arch, num_layers=len(FACTORS))
    with torch.inference_mode() if made_in_inference_mode else contextlib.nullcontext():
        model = adapted(base).base_model.model
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(IDS).logits, model(IDS).logits)
    torch._dynamo.reset()
