"""`run_eval(EvalSettings)`: the Python form of `rope-adapter eval`, and the one paired-difference rule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rope_adapter.cli import main
from rope_adapter.evaluate import EvalError, EvalSettings, run_eval
from rope_adapter.scoring.intervals import difference_from_se, paired_t_interval
from rope_adapter.scoring.numbers import fmt, fmt_interval
from rope_adapter.scoring.paired import differences_by_position_and_record
from rope_adapter.scoring.results_table import t_difference


@pytest.fixture(scope="module")
def tiny_llama_layers():
    return 2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"batch_size": 0}, "--batch-size must be >= 1"),
        ({"num_samples": True}, "--num-samples must be >= 1"),
        ({"max_batch_tokens": -5}, "--max-batch-tokens must be >= 1"),
        ({"variants": " , "}, "--variants is empty"),
        ({"variants": "base", "adapter": "x"}, "--adapter only sets the default variants"),
        ({"scores": "accuracy,bleu"}, "unknown --scores"),
        ({"task": "perplexity"}, "needs --data"),
        ({"chat_template": "maybe"}, "chat_template must be one of"),
    ],
)
def test_settings_are_checked_when_made(kwargs, needle, tmp_path):
    with pytest.raises(EvalError, match=needle):
        EvalSettings.flat(out=tmp_path / "never", **kwargs)
    assert not (tmp_path / "never").exists()


def test_run_eval_writes_what_the_cli_writes(model_dir, tmp_path, capsys):
    common = dict(model=str(model_dir), num_pairs=3, num_positions=3, num_samples=2, device="cpu", progress=False)
    api = run_eval(
        EvalSettings.flat(variants="base,uniform:1.5", out=tmp_path / "api", plot=False, **common), log=lambda s: None
    )
    rc = main(
        ["eval", "--model", str(model_dir), "--num-pairs", "3", "--num-positions", "3", "--num-samples", "2"]
        + ["--variants", "base,uniform:1.5", "--out", str(tmp_path / "cli"), "--no-plot", "--no-progress"]
        + ["--device", "cpu"]
    )
    assert rc == 0
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    written = json.loads(api.paths["json"].read_text())
    assert written["summary"] == cli["summary"] == api.to_dict()["summary"]
    assert written["comparisons"] == cli["comparisons"]
    assert written["settings"]["command"].replace(str(tmp_path / "api"), "OUT") == cli["settings"]["command"].replace(
        str(tmp_path / "cli"), "OUT"
    )
    assert set(api.paths) == {"json", "markdown", "table"}


def test_a_bad_device_is_refused_before_the_weights_load(model_dir, tmp_path, monkeypatch):
    from rope_adapter.evaluate import evaluation as ev

    monkeypatch.setattr(ev, "load_model", lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(EvalError, match="--device 'tpu'"):
        run_eval(EvalSettings.flat(model=str(model_dir), device="tpu", pairs=3, out=tmp_path / "o"), log=lambda s: None)
    assert not (tmp_path / "o").exists()


def test_one_paired_difference_rule_everywhere():
    rng = np.random.default_rng(3)
    a, b = rng.random(40), rng.random(40)
    positions = np.tile([0, 1, 2, 3], 10)
    ids = [f"r{i // 4}" for i in range(40)]
    by_record = differences_by_position_and_record(a, b, positions, ids)
    # per position: the same t interval and verdict as the sample-level rule eval uses
    for p in range(4):
        mask = positions == p
        direct = paired_t_interval(a[mask], b[mask])
        entry = by_record["by_position"][str(p)]
        assert entry["ci_low"] == pytest.approx(direct.low) and entry["ci_high"] == pytest.approx(direct.high)
        assert entry["verdict"] == direct.verdict
        # the card's reader rebuilds the same interval from the stored diff, se and n
        card = t_difference(entry["diff"], entry["se"], entry["n"])
        assert (card.low, card.high, card.verdict) == (
            pytest.approx(direct.low),
            pytest.approx(direct.high),
            direct.verdict,
        )
    # the mean over positions pairs by record: the rule applied to the per-record means
    rec_a, rec_b = a.reshape(10, 4).mean(axis=1), b.reshape(10, 4).mean(axis=1)
    direct = paired_t_interval(rec_a, rec_b)
    assert by_record["mean"]["ci_low"] == pytest.approx(direct.low)
    assert by_record["mean"]["n_records"] == 10 and by_record["mean"]["verdict"] == direct.verdict


def test_difference_from_se_verdicts():
    assert difference_from_se(0.0, 0.0, 5).verdict == "identical"
    assert difference_from_se(0.5, 0.1, 20).verdict == "better"
    assert difference_from_se(0.5, 0.1, 20, higher_is_better=False).verdict == "worse"
    assert difference_from_se(0.05, 0.1, 20).verdict == "within noise"
    assert difference_from_se(0.05, None, 1).verdict == "n/a"


def test_the_one_number_formatter():
    assert fmt(0.12345) == "0.123" and fmt(0.12345, 2, sign=True) == "+0.12"
    assert fmt(None) == fmt(float("nan")) == "–" and fmt(7) == "7"
    assert fmt_interval(0.2, 0.1, 0.3, 2) == "0.20 [0.10, 0.30]" and fmt_interval(0.2, None, None) == "0.200"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"what": "colour"}, "--what takes a comma-separated list of decay, attention, sensitivity"),
        ({"adapter": "a", "variant": "uniform:1.2"}, "give --adapter or --variant, not both"),
        ({"head_dim": 7}, "--head-dim must be an even number"),
        ({"skip_first": -1}, "--skip-first must be >= 0"),
        ({"task": "perplexity"}, "attention shares and sensitivity need prompts"),
    ],
)
def test_analyze_settings_are_checked_when_made(kwargs, needle, tmp_path):
    from rope_adapter.evaluate import AnalyzeSettings

    with pytest.raises(EvalError, match=needle):
        AnalyzeSettings.flat(out=tmp_path / "never", **kwargs)


def test_run_analysis_draws_the_decay_bound_without_a_model(tmp_path):
    from rope_adapter.evaluate import AnalyzeSettings, run_analysis

    settings = AnalyzeSettings(what="decay", head_dim=16, theta=10000.0, max_distance=64, out=tmp_path / "a")
    paths = run_analysis(settings, log=lambda s: None)
    data = json.loads(paths["decay_json"].read_text())
    assert len(data["curves"]) == 3  # base, 1.25 and 2.0
    assert paths["decay_plot"].stat().st_size > 0 and "RoPE long-term decay" in paths["markdown"].read_text()
