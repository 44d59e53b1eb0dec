"""`rope-adapter analyze`: RoFormer's decay bound (analytic) and last-token attention shares (eager)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from peft import get_peft_model
from testkit.tiny_models import tiny_model

from rope_adapter import LrsConfig
from rope_adapter.cli import main
from rope_adapter.evaluate import evaluation as ev
from rope_adapter.evaluate.analysis import (
    REGIONS,
    decay_curves,
    eager_attention,
    last_token_attention_shares,
    region_bounds,
    region_shares,
    relative_upper_bound,
    rope_inv_freq,
)
from rope_adapter.evaluate.sensitivity_report import sensitivity_lines
from rope_adapter.scoring.variants import build_variant, parse_variant

# ---------------------------------------------------------------------------------------------------- decay bound


def brute_force_bound(r: float, head_dim: int, theta: float, factor: float) -> float:
    """The RoFormer formula written out term by term."""
    half = head_dim // 2
    thetas = [theta ** (-2 * k / head_dim) / factor for k in range(half)]
    total = 0.0
    for j in range(1, half + 1):
        s_j = sum(complex(np.cos(r * thetas[k]), np.sin(r * thetas[k])) for k in range(j))
        total += abs(s_j)
    return total / half


def test_bound_matches_the_formula():
    distances = [0, 1, 3, 17, 250]
    got = relative_upper_bound(distances, head_dim=16, theta=10000.0, factor=1.3)
    expected = [brute_force_bound(r, 16, 10000.0, 1.3) for r in distances]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got[0] == pytest.approx((16 / 2 + 1) / 2)  # every |S_j| = j at distance 0


def test_a_factor_stretches_the_curve_along_the_distance_axis():
    r = np.arange(0, 400)
    for s in (1.25, 2.0, 4.0):
        scaled = relative_upper_bound(r * s, head_dim=64, theta=1e5, factor=s)
        np.testing.assert_allclose(scaled, relative_upper_bound(r, head_dim=64, theta=1e5), rtol=1e-9, atol=1e-12)


def test_bound_decays_and_larger_factors_decay_slower():
    r = np.arange(1, 257)
    base = relative_upper_bound(r)
    assert base[:16].mean() > base[64:128].mean() > base[192:].mean()  # long-term decay (RoFormer Fig. 2)
    slow = relative_upper_bound(r, factor=2.0)
    assert slow[:64].mean() > base[:64].mean()
    own = relative_upper_bound(r, inv_freq=rope_inv_freq(128) / 2.0)
    np.testing.assert_allclose(own, slow)


def test_decay_curves_and_bad_input():
    data = decay_curves([1.0, 2.0], max_distance=100, head_dim=32, theta=500.0)
    assert data["scale"] == "linear" and len(data["curves"]) == 2
    assert len(data["curves"][0]["bound"]) == len(data["distances"]) == 101
    assert data["distances"][0] == 0 and data["distances"][-1] == 100
    wide = decay_curves([1.0, 2.0], max_distance=5000, head_dim=32, theta=500.0, bins=50)
    assert wide["scale"] == "log" and len(wide["distances"]) == len(wide["curves"][1]["bound"]) <= 50
    assert all(np.diff(wide["distances"]) > 0) and 1 <= wide["distances"][0] and wide["distances"][-1] <= 5000
    for curve in wide["curves"]:
        assert all(
            lo <= m <= hi for lo, m, hi in zip(curve["bound_min"], curve["bound"], curve["bound_max"], strict=True)
        )
    with pytest.raises(ValueError, match="head_dim"):
        relative_upper_bound([1], head_dim=7)
    with pytest.raises(ValueError, match="factor"):
        relative_upper_bound([1], factor=0.0)
    with pytest.raises(ValueError, match="max_distance"):
        decay_curves([1.0], max_distance=0)


# ---------------------------------------------------------------------------------------------------- attention


def test_regions_cover_the_context():
    assert region_bounds(9) == [(0, 3), (3, 6), (6, 9)]
    assert region_bounds(10, skip_first=1) == [(1, 4), (4, 7), (7, 10)]
    shares = region_shares(torch.tensor([0.5, 0.1, 0.1, 0.1, 0.1, 0.1]), 6, skip_first=1)
    np.testing.assert_allclose(shares, [0.4, 0.2, 0.4])  # regions (1, 3), (3, 4), (4, 6)
    window = region_shares(torch.tensor([0.5, 0.5]), 9)  # a sliding window over the last 2 of 9 positions
    np.testing.assert_allclose(window, [0.0, 0.0, 1.0])
    with pytest.raises(ValueError):
        region_bounds(2)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_shares_match_a_full_eager_forward(arch):
    model = tiny_model(arch, num_layers=2)
    before = model.config._attn_implementation
    seqs = [list(range(3, 3 + 47)), list(range(10, 10 + 90))]
    shares = last_token_attention_shares(model, seqs, skip_first=0)
    assert model.config._attn_implementation == before  # switched back
    assert shares.shape == (2, len(REGIONS))
    np.testing.assert_allclose(shares.sum(1), 1.0, atol=1e-9)
    expected = np.zeros_like(shares)
    with eager_attention(model), torch.inference_mode():
        for seq in seqs:
            attn = model(torch.tensor([seq]), output_attentions=True).attentions
            for layer, a in enumerate(attn):
                expected[layer] += np.mean([region_shares(row, len(seq)) for row in a[0, :, -1, :]], axis=0)
    np.testing.assert_allclose(shares, expected / len(seqs), atol=1e-5)


def test_shares_with_an_adapter():
    model = tiny_model("llama", num_layers=3)
    seqs = [list(range(3, 200))]
    base = last_token_attention_shares(model, seqs)
    with build_variant(model, parse_variant("uniform:1")) as same:
        np.testing.assert_array_equal(last_token_attention_shares(same, seqs), base)
    with build_variant(model, parse_variant("uniform:4")) as stretched:
        assert not np.allclose(last_token_attention_shares(stretched, seqs), base)
    with pytest.raises(ValueError, match="no prompts"):
        last_token_attention_shares(model, [])


# ---------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def tiny_llama_layers():
    return 3


def test_cli_analyze(model_dir, tmp_path):
    adapter = tmp_path / "adapter"
    get_peft_model(tiny_model("llama", num_layers=3), LrsConfig(factors=[1.0, 1.5, 2.5])).save_pretrained(adapter)
    out = tmp_path / "analysis"
    args = ["analyze", "--model", str(model_dir), "--adapter", str(adapter), "--num-pairs", "3", "--num-positions", "3"]
    args += ["--num-samples", "2"]
    rc = main(args + ["--factors", "1.5", "--out", str(out), "--no-progress", "--device", "cpu"])
    assert rc == 0
    decay = json.loads((out / "decay.json").read_text())
    assert decay["head_dim"] == 16 and decay["theta"] == 100.0  # read from the model config
    assert [c["factor"] for c in decay["curves"]] == [1.0, 1.5, 1.0, 2.5]  # base, --factors, adapter min/max
    assert decay["distances"][-1] == 512
    attention = json.loads((out / "attention.json").read_text())
    assert [v["name"] for v in attention["variants"]] == ["base", parse_variant(f"adapter:{adapter}").name]
    for entry in attention["variants"]:
        shares = np.asarray(entry["shares"])
        assert shares.shape == (3, 3)
        np.testing.assert_allclose(shares.sum(1), 1.0, atol=1e-9)
    assert attention["num_samples"] == 2 * 3  # records x positions
    for name in ("decay.png", "attention.png", "analysis.md"):
        assert (out / name).stat().st_size > 0


def test_cli_sensitivity_at_base_and_adapter(model_dir, tmp_path):
    adapter = tmp_path / "adapter"
    factors = [0.8, 1.25, 1.5]
    get_peft_model(tiny_model("llama", num_layers=3), LrsConfig(factors=factors)).save_pretrained(adapter)
    out = tmp_path / "sens"
    args = ["analyze", "--model", str(model_dir), "--adapter", str(adapter), "--what", "sensitivity,attention"]
    args += ["--num-pairs", "3", "--num-positions", "3", "--num-samples", "2", "--out", str(out), "--no-progress"]
    assert main(args + ["--device", "cpu"]) == 0
    data = json.loads((out / "sensitivity.json").read_text())
    assert [p["name"] for p in data["points"]] == ["base", parse_variant(f"adapter:{adapter}").name]
    assert data["points"][0]["factors"] == [1.0] * 3
    assert data["points"][1]["factors"] == pytest.approx(factors)
    assert data["num_samples"] == 6 and data["num_records"] == 2
    base, found = (np.asarray(p["per_sample"]) for p in data["points"])
    assert base.shape == found.shape == (6, 3) and not np.allclose(base, found)  # two different points
    assert not (out / "decay.json").exists()  # only the parts asked for
    md = (out / "analysis.md").read_text()
    assert "## Sensitivity to each layer's factor" in md and "## Where the last token's attention lands" in md
    assert "\n".join(sensitivity_lines(data)) in md  # the section redraws from the JSON file alone
    assert (out / "sensitivity.png").stat().st_size > 0


def test_cli_sensitivity_refuses_a_rope_type_variant(model_dir, tmp_path, capsys):
    out = tmp_path / "analysis"
    rc = main(
        ["analyze", "--model", str(model_dir), "--what", "sensitivity", "--variant", "linear:2", "--out", str(out)]
    )
    assert rc == 2 and "LRS factors only" in capsys.readouterr().err
    assert not out.exists()


def test_cli_decay_alone_needs_no_model(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("no model needed")

    monkeypatch.setattr(ev, "load_model_config", refuse)
    monkeypatch.setattr(ev, "load_model", refuse)
    out = tmp_path / "decay"
    rc = main(
        ["analyze", "--what", "decay", "--head-dim", "128", "--theta", "10000", "--max-distance", "256"]
        + ["--out", str(out)]
    )
    assert rc == 0
    assert len(json.loads((out / "decay.json").read_text())["curves"]) == 3


def test_cli_analyze_bad_input(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ev, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    for extra, message in [
        (["--what", "pictures"], "--what takes a comma-separated list of decay, attention, sensitivity"),
        (["--variant", "lora:1"], "unknown variant"),
        (["--variant", "base"], "compares the base with itself"),
        (["--num-pairs", "3", "--positions", "0,8"], "outside"),
        (["--adapter", str(tmp_path / "missing")], "no such adapter folder"),
    ]:
        rc = main(["analyze", "--model", str(model_dir), "--out", str(tmp_path / "o")] + extra)
        assert rc == 2, extra
        assert message in capsys.readouterr().err, extra
