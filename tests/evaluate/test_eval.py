"""`rope-adapter eval`: variants, the position sweep and extrapolation on tiny models (the interval maths is
tested in tests/scoring/test_intervals.py).

Properties that hold for any model: files exist and parse, one U-curve point per position and variant, a
variant equal to the base scores identically, extrapolation at 4x the model's positions keeps at most
``chunk_tokens`` rows of logits. Bad input fails before the model loads.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from peft import get_peft_model
from testkit.eval_fixtures import LAYERS
from testkit.tiny_models import byte_tokenizer, tiny_model

import rope_adapter
from rope_adapter import AdapterMismatchError, LrsConfig
from rope_adapter.evaluate import evaluation as ev
from rope_adapter.evaluate.extrapolation import (
    default_extrapolation_variants,
    evaluate_lengths,
    length_windows,
    parse_lengths,
    window_logprobs,
)
from rope_adapter.scoring.variants import (
    VariantError,
    build_variant,
    check_variants,
    parse_variants,
    shared_weight_copy,
)

# ---------------------------------------------------------------------------------------------------- fixtures
# (adapter_dir, text_file and no_model_load: tests/evaluate/conftest.py)


@pytest.fixture(scope="module")
def tiny_llama_layers():
    return LAYERS


# ---------------------------------------------------------------------------------------------------- variants


def test_parse_variants_and_labels():
    variants = parse_variants("base, uniform:1.10 ,linear:2+adapter:runs/x/adapter,found=dynamic:2+uniform:1.2,yarn:4")
    assert [v.name for v in variants] == [
        "base",
        "uniform:1.1",
        "linear:2+adapter:x/adapter",
        "found",
        "yarn:4",
    ]
    assert variants[0].is_base and not variants[1].is_base
    assert variants[2].rope_type == "linear" and variants[2].adapter == "runs/x/adapter"
    assert variants[3].spec == "dynamic:2+uniform:1.2"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("base,lora:2", "unknown variant 'lora:2'"),
        ("uniform:abc", "needs a number"),
        ("uniform:0", "must be finite, in"),
        ("linear:0.5", ">= 1"),
        ("linear:2+dynamic:2", "at most one RoPE type"),
        ("uniform:1.1+adapter:x", "at most one of uniform"),
        ("base+uniform:1.1", "cannot be combined"),
        ("uniform:1.1,uniform:1.1", "listed twice"),
        ("adapter:", "needs a value"),
        ("linear:2+best=adapter:x", r"a label goes before the whole spec, as in NAME=linear:2\+adapter:x"),
        (",", "no variants"),
    ],
)
def test_bad_variants(spec, message):
    with pytest.raises(VariantError, match=message):
        parse_variants(spec)


def test_shared_weight_copy_shares_parameters(tiny_llama):
    copy = shared_weight_copy(tiny_llama)
    assert all(a is b for a, b in zip(tiny_llama.parameters(), copy.parameters(), strict=True))
    assert copy.config is not tiny_llama.config


def test_variants_leave_the_base_untouched_and_mean_what_they_say(tiny_llama):
    ids = torch.randint(3, 250, (1, 120))
    with torch.inference_mode():
        ref = tiny_llama(ids).logits
    variants = parse_variants("base,uniform:1,uniform:2,linear:2,linear:2+uniform:1.5,linear:3")
    plans = check_variants(variants, tiny_llama.config)
    logits = {}
    for v in variants:
        with build_variant(tiny_llama, v, plans.get(v.name)) as built, torch.inference_mode():
            logits[v.name] = built(ids).logits
    assert torch.equal(logits["base"], ref) and torch.equal(logits["uniform:1"], ref)
    assert torch.allclose(logits["uniform:2"], logits["linear:2"], atol=1e-5)  # uniform s == linear s
    assert torch.allclose(logits["linear:2+uniform:1.5"], logits["linear:3"], atol=1e-5)  # stacked: f * s
    assert not torch.allclose(logits["linear:2"], ref, atol=1e-3)
    with torch.inference_mode():
        assert torch.equal(tiny_llama(ids).logits, ref)  # the base model was never changed
    assert tiny_llama.config.rope_parameters["rope_type"] == "default"
    assert rope_adapter.count_layer_hooks(tiny_llama) == 0


def test_adapter_plans(tiny_llama, adapter_dir, tmp_path):
    variants = parse_variants(f"adapter:{adapter_dir},linear:2+adapter:{adapter_dir}")
    plans = check_variants(variants, tiny_llama.config)
    plain, combined = (plans[v.name] for v in variants)
    assert plain.load_as_saved and not combined.load_as_saved
    assert combined.factors == pytest.approx([1.0, 1.3, 1.8])
    with build_variant(tiny_llama, variants[1], combined) as built:
        assert rope_adapter.get_factors(built) == pytest.approx([1.0, 1.3, 1.8])
        assert built.config.rope_parameters["rope_type"] == "linear"
    # an adapter for another base: other layer count, other RoPE settings
    other = tmp_path / "other"
    get_peft_model(tiny_model("llama", num_layers=2), LrsConfig(factors=1.2)).save_pretrained(other)
    with pytest.raises(AdapterMismatchError, match="made for a model with 2 decoder layers, this llama model has 3"):
        check_variants(parse_variants(f"adapter:{other}"), tiny_llama.config)
    yarn_made = tmp_path / "yarn"
    with build_variant(tiny_llama, parse_variants("yarn:4")[0]) as yarn_model:
        get_peft_model(yarn_model, LrsConfig(factors=1.1)).save_pretrained(yarn_made)
    with pytest.raises(AdapterMismatchError, match="RoPE settings"):
        check_variants(parse_variants(f"adapter:{yarn_made}"), tiny_llama.config)
    with pytest.raises(AdapterMismatchError, match="RoPE settings"):
        check_variants(parse_variants(f"linear:2+adapter:{yarn_made}"), tiny_llama.config)
    assert check_variants(parse_variants(f"yarn:4+adapter:{yarn_made}"), tiny_llama.config)  # made for this one


# ---------------------------------------------------------------------------------------------------- positions


@pytest.fixture(scope="module")
def position_result(tiny_llama, tmp_path_factory):
    tokenizer = byte_tokenizer()
    task, samples = ev.make_task_samples("kv_retrieval", num_samples=3, num_pairs=4, positions=[0, 1, 3])
    variants = parse_variants("base,same=uniform:1,uniform:1.5")
    result = ev.evaluate_positions(
        tiny_llama,
        tokenizer,
        task,
        samples,
        variants,
        plans=check_variants(variants, tiny_llama.config),
        progress=False,
    )
    out = tmp_path_factory.mktemp("eval")
    return result, result.write(out), out


def test_position_outputs_exist_and_parse(position_result):
    result, paths, out = position_result
    assert {p.name for p in paths.values()} == {"results.json", "results.md", "positions.png", "results_table.json"}
    data = json.loads((out / "results.json").read_text())
    assert data["kind"] == "positions" and data["positions"] == [0, 1, 3]
    assert len(data["samples"]) == 3 * 9  # variants x samples, every sample's score kept
    markdown = (out / "results.md").read_text()
    assert "| `uniform:1.5` |" in markdown and "identical" in markdown
    import matplotlib.image

    image = matplotlib.image.imread(out / "positions.png")
    assert image.shape[0] > 100 and image.shape[1] > 100


def test_u_curve_has_one_point_per_position_and_variant(position_result):
    data = position_result[0].to_dict()
    assert set(data["summary"]) == {"base", "same", "uniform:1.5"}
    for name, by_metric in data["summary"].items():
        assert set(by_metric) == {"accuracy", "logprob"}
        for metric, entry in by_metric.items():
            assert list(entry["by_position"]) == ["0", "1", "3"], (name, metric)
            for point in [*entry["by_position"].values(), entry["overall"]]:
                assert point["ci_low"] <= point["mean"] <= point["ci_high"]
            assert entry["by_position"]["1"]["n"] == 3 and entry["overall"]["n"] == 9


def test_variant_equal_to_base_scores_identically(position_result):
    result = position_result[0]
    for metric in ("accuracy", "logprob"):
        np.testing.assert_array_equal(result.values("same", metric), result.values("base", metric))
    rows = {(r["variant"], r["sample"]): r for r in result.rows}
    assert all(rows[("same", i)]["prediction"] == rows[("base", i)]["prediction"] for i in range(9))
    comparisons = result.comparisons()
    assert comparisons["same"]["logprob"]["overall"]["verdict"] == "identical"
    assert comparisons["same"]["accuracy"]["overall"]["verdict"] == "identical"
    assert comparisons["uniform:1.5"]["logprob"]["overall"]["verdict"] != "identical"


def test_held_out_records_are_the_other_side_of_the_search_split():
    from rope_adapter.scoring.tasks import KVRetrievalTask, split_records

    _, held = ev.make_task_samples(
        "kv_retrieval", num_samples=3, num_pairs=3, num_positions=2, seed=4, held_out_after=3
    )
    pool = KVRetrievalTask(num_records=6, num_pairs=3, num_positions=2, seed=4).load_records()
    search, holdout = split_records(pool, 3, 3, seed=4)
    assert [s.record_id for s in held[::2]] == [r.record_id for r in holdout]
    assert {r.record_id for r in search}.isdisjoint({s.record_id for s in held})
    assert len(held) == 6


# ---------------------------------------------------------------------------------------------------- extrapolation


def test_parse_lengths():
    assert parse_lengths("16k, 2k,4k,8k") == [2048, 4096, 8192, 16384]
    assert parse_lengths("300,1k") == [300, 1024]
    for bad in ["", "2q", "1", "2k,2048", "0.3k"]:
        with pytest.raises(ev.EvalError):
            parse_lengths(bad)
    assert default_extrapolation_variants([2048, 16384], 8192, "a") == (
        "base,linear:2,dynamic:2,linear:2+adapter:a,dynamic:2+adapter:a"
    )


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt_neox"])
def test_chunked_logprobs_equal_full_logits(arch):
    model = tiny_model(arch, num_layers=2)
    ids = torch.randint(3, 250, (2, 90))
    with torch.inference_mode():
        full = model(ids).logits.float().log_softmax(-1)
    expected = full[:, :-1].gather(-1, ids[:, 1:, None])[..., 0].double()
    for chunk in (7, 89, 1000):
        got = window_logprobs(model, ids, chunk_tokens=chunk)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=0)


def test_extrapolation_at_4x_positions_keeps_bounded_logits(tiny_llama, adapter_dir, text_file, tmp_path):
    max_positions = tiny_llama.config.max_position_embeddings
    lengths = [max_positions, 4 * max_positions]
    windows = length_windows(text_file, byte_tokenizer(), lengths, num_windows=2)
    assert [len(w) for w in windows[4 * max_positions]] == [4 * max_positions] * 2
    rows_seen: list[int] = []
    head = tiny_llama.get_output_embeddings()
    hook = head.register_forward_hook(lambda mod, inp, out: rows_seen.append(out.shape[0] * out.shape[1]))
    try:
        variants = parse_variants(
            f"base,linear:4,dynamic:4,linear:4+adapter:{adapter_dir},dynamic:4+adapter:{adapter_dir}"
        )
        result = evaluate_lengths(
            tiny_llama,
            windows,
            variants,
            plans=check_variants(variants, tiny_llama.config),
            chunk_tokens=256,
            batch_size=4,
            max_batch_tokens=2 * max_positions,
            progress=False,
        )
    finally:
        hook.remove()
    # no forward ever produced more than chunk_tokens rows of logits (batch x rows), even at 4x the positions
    assert rows_seen and max(rows_seen) <= 256
    paths = result.write(tmp_path)
    assert {p.name for p in paths.values()} == {"results.json", "results.md", "lengths.png"}
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["kind"] == "lengths" and data["lengths"] == lengths
    for name, entry in data["summary"].items():
        for n, point in entry["by_length"].items():
            assert point["ci_low"] <= point["perplexity"] <= point["ci_high"], (name, n)
            assert point["windows"] == 2 and math.isfinite(point["perplexity"])
    assert len(data["windows"]) == 5 * 2 * 2
    # dynamic NTK changes nothing within the trained context and something beyond it
    base, dynamic = (data["summary"][k]["by_length"] for k in ("base", "dynamic:4"))
    assert dynamic[str(max_positions)]["perplexity"] == base[str(max_positions)]["perplexity"]
    assert dynamic[str(4 * max_positions)]["perplexity"] != base[str(4 * max_positions)]["perplexity"]
