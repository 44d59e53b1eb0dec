"""Pooling `rope-adapter eval` runs (`rope-adapter compare`, :mod:`rope_adapter.evaluate.pooling`) on what
`eval` really writes: runs on the same samples are joined, runs on other seeds add records, and runs that cannot be
pooled are refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from testkit.eval_runs import eval_runner

from rope_adapter.cli import main
from rope_adapter.evaluate import pooling as pairing
from rope_adapter.scoring.loading import EvalError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    run = eval_runner(tmp_path_factory.mktemp("pair-eval"), num_samples=2)
    return {
        "seed1": run("seed1", "base,uniform:1.5", seed=1),
        "seed1-found": run("seed1-found", "found=uniform:1.2", seed=1),
        "seed2": run("seed2", "base,found=uniform:1.2", seed=2),
        "pairs4": run("pairs4", "base,found=uniform:1.2", seed=3, num_pairs=4),
    }


def _by_record(paths: list[Path], variant: str, reference: str, metric: str) -> list[float]:
    """Each record's mean over its positions of ``variant - reference``, straight from the samples."""
    values: dict[str, dict[tuple[str, int], float]] = {variant: {}, reference: {}}
    for path in paths:
        for s in json.loads(path.read_text())["samples"]:
            if s["variant"] in values:
                values[s["variant"]][(s["record_id"], s["position"])] = s[metric]
    records: dict[str, list[float]] = {}
    for key, value in values[variant].items():
        records.setdefault(key[0], []).append(value - values[reference][key])
    return [float(np.mean(v)) for v in records.values()]


def test_pooled_runs_count_each_record_once(runs):
    paths = [runs["seed1"], runs["seed1-found"], runs["seed2"]]
    pooled = pairing.load_runs(paths)
    for metric in ("logprob", "accuracy"):
        row = pairing.compare(pooled, "found", "base", metric)
        assert row["records"] == 4 and row["samples"] == 12
        assert row["seeds"] == ["kv-seed1", "kv-seed2"]
        expected = _by_record(paths, "found", "base", metric)
        assert row["mean"] == pytest.approx(np.mean(expected))
        if np.ptp(expected) > 0:
            assert row["ci_low"] < row["mean"] < row["ci_high"]
            assert row["bootstrap_low"] <= row["mean"] <= row["bootstrap_high"]
    # uniform:1.5 was scored on seed 1 only: compared on seed 1's records only
    only = pairing.compare(pooled, "uniform:1.5", "found", "logprob")
    assert only["records"] == 2 and only["seeds"] == ["kv-seed1"]
    text = pairing.markdown([pairing.compare(pooled, "found", "base", "logprob")], paths)
    assert "| logprob | found - base | 4 (kv-seed1, kv-seed2) |" in text


def test_runs_that_cannot_be_pooled_are_refused(runs, tmp_path):
    with pytest.raises(EvalError, match="differ in .*task_settings"):
        pairing.load_runs([runs["seed1"], runs["pairs4"]])
    changed = json.loads(runs["seed1"].read_text())
    changed["samples"][0]["logprob"] += 1.0
    copy = tmp_path / "results.json"
    copy.write_text(json.dumps(changed))
    with pytest.raises(EvalError, match="scored before with other values"):
        pairing.load_runs([runs["seed1"], copy])
    with pytest.raises(EvalError, match="no samples of variant 'nope'"):
        pairing.compare(pairing.load_runs([runs["seed1"]]), "nope", "base", "logprob")


def test_the_compare_command_prints_the_pooled_table_or_json_and_writes_nothing(runs, capsys):
    folders = [runs["seed1"].parent, runs["seed1-found"].parent, runs["seed2"].parent]
    before = sorted(p for f in folders for p in f.rglob("*"))
    assert main(["compare", *map(str, folders), "--compare", "found", "base", "--metrics", "logprob"]) == 0
    text = capsys.readouterr().out
    assert "| logprob | found - base | 4 (kv-seed1, kv-seed2) |" in text
    want = pairing.compare(pairing.load_runs(folders), "found", "base", "logprob")
    assert main(["compare", *map(str, folders), "--compare", "found", "base", "--metrics", "logprob", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["mean"] == pytest.approx(want["mean"]) and row["records"] == 4
    assert sorted(p for f in folders for p in f.rglob("*")) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare", "nope", "base"], "no samples of variant 'nope'; the runs have base, uniform:1.5"),
        (["--compare", "uniform:1.5", "base", "--metrics", "bleu"], "no common samples with 'bleu'"),
        (["--compare", "uniform:1.5", "base", "--metrics", " , "], "names no metric"),
    ],
)
def test_the_compare_command_refuses_with_one_line(runs, capsys, argv, message):
    assert main(["compare", str(runs["seed1"]), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err


def test_the_compare_command_refuses_runs_that_cannot_be_pooled(runs, capsys):
    assert main(["compare", str(runs["seed1"]), str(runs["pairs4"]), "--compare", "found", "base"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "differ in positions, task_settings" in err, err


def test_runs_that_score_other_things_under_the_same_names_are_refused(tmp_path):
    """What a run's names hide is checked: a variant name that means other factors, other weights under the same
    model path, another data file of the same name, and settings that change a score."""
    from testkit.litm_files import write_kv_file
    from testkit.tiny_models import save_model_folder, tiny_model

    run = eval_runner(tmp_path, num_samples=2)
    a = run("a", "base,found=uniform:1.5", seed=1)
    other_factors = run("b", "base,found=uniform:4.0", seed=2)
    with pytest.raises(EvalError, match="variant 'found' has other factors"):
        pairing.load_runs([a, other_factors])
    # other weights saved where the first ones were: the same --model string, another model
    model = tmp_path / "model"
    before = run("before", "base", seed=3)
    save_model_folder(tiny_model("llama", num_layers=2, seed=1), model)
    after = run("after", "found=uniform:1.5", seed=3)
    with pytest.raises(EvalError, match="differ in model_identity"):
        pairing.load_runs([before, after])
    # the same weights with another chat template in the folder: other prompts
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    templated = run("templated", "found=uniform:1.5", seed=3)
    with pytest.raises(EvalError, match="differ in model_identity"):
        pairing.load_runs([after, templated])
    # two data files named alike (record ids kv:N in both): other records, never paired
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    d1 = write_kv_file(tmp_path / "d1" / "kv.jsonl", num_records=4, num_pairs=3, seed=1)
    d2 = write_kv_file(tmp_path / "d2" / "kv.jsonl", num_records=4, num_pairs=3, seed=2)
    one = run("d1run", "base", data=str(d1), seed=0)
    two = run("d2run", "found=uniform:1.5", data=str(d2), seed=0)
    with pytest.raises(EvalError, match="differ in .*data_identity"):
        pairing.load_runs([one, two])
    # the same file in another folder (another machine, a committed run's scrubbed `<local>/`): the same records
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "kv.jsonl"
    moved.write_bytes(d1.read_bytes())
    three = run("d1-elsewhere", "found=uniform:1.5", data=str(moved), seed=0)
    scrubbed = json.loads((tmp_path / "d1run" / "results.json").read_text())
    scrubbed["settings"]["task_settings"]["data_path"] = "<local>/kv.jsonl"
    (tmp_path / "d1run" / "results.json").write_text(json.dumps(scrubbed))
    assert pairing.compare(pairing.load_runs([one, three]), "found", "base", "tf_accuracy")["records"] == 2
    # a score computed another way
    short = run("short", "found=uniform:1.5", seed=3, logprob_tokens=1)
    after_all = run("after-all", "base", seed=3)
    with pytest.raises(EvalError, match="differ in logprob_tokens"):
        pairing.load_runs([after_all, short])
    prompt = run("prompt", "found=uniform:1.5", seed=3, system_prompt="Answer briefly.")
    with pytest.raises(EvalError, match="differ in system_prompt"):
        pairing.load_runs([after_all, prompt])


def test_a_file_without_the_newer_settings_pools_with_one_that_has_them(runs, tmp_path):
    """results.json files written before a setting was recorded pool with newer ones (the setting is compared where
    both have it), and a variant scored with more metrics in one run than another is merged, not refused."""
    old = json.loads(runs["seed1"].read_text())
    for name in pairing.RECORDED_SINCE:
        old["settings"].pop(name, None)
    older = tmp_path / "older" / "results.json"
    older.parent.mkdir()
    older.write_text(json.dumps(old))
    pooled = pairing.load_runs([older, runs["seed1-found"], runs["seed2"]])
    assert pairing.compare(pooled, "found", "base", "logprob")["records"] == 4
    # a model folder recorded before its other files were (no "files"): the same model, either order
    before_files = json.loads(runs["seed1"].read_text())
    assert "files" in before_files["settings"]["model_identity"]
    before_files["settings"]["model_identity"].pop("files")
    path = tmp_path / "before-files" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(before_files))
    for order in ([path, runs["seed1-found"], runs["seed2"]], [runs["seed2"], path, runs["seed1-found"]]):
        assert pairing.compare(pairing.load_runs(order), "found", "base", "logprob")["records"] == 4
    fewer = json.loads(runs["seed1"].read_text())
    for sample in fewer["samples"]:
        sample.pop("accuracy")
    path = tmp_path / "fewer" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(fewer))
    merged = pairing.load_runs([path, runs["seed1"]])
    assert all("accuracy" in v and "logprob" in v for v in merged["base"].values())


def test_a_hub_model_is_named_by_its_commit(tmp_path, monkeypatch):
    """A Hub repository updated between two runs holds another model under the same name (was: pooled, and an
    interrupted run resumed, as one model): eval records the commit the name resolved to; a run recorded before
    commits were (by the name only) still pools with the same model's runs."""
    from testkit.hub_cache import HubCache
    from testkit.tiny_models import save_model_folder, tiny_model

    hub = HubCache(tmp_path / "hf-cache", "org/tiny-llama", monkeypatch)
    first = hub.publish(save_model_folder(tiny_model("llama", num_layers=2, seed=0), tmp_path / "m0"), "a" * 40)
    run = eval_runner(tmp_path, num_samples=2, model=hub.repo)
    before = run("before", "base", seed=1)
    assert json.loads(before.read_text())["settings"]["model_identity"] == {"hub": hub.repo, "revision": first}
    hub.publish(save_model_folder(tiny_model("llama", num_layers=2, seed=1), tmp_path / "m1"), "b" * 40)
    after = run("after", "found=uniform:1.5", seed=1)
    with pytest.raises(EvalError, match="differ in model_identity"):
        pairing.load_runs([before, after])
    named = json.loads(after.read_text())
    named["settings"]["model_identity"] = hub.repo  # as a run recorded it before commits were recorded
    older = tmp_path / "older" / "results.json"
    older.parent.mkdir()
    older.write_text(json.dumps(named))
    pooled = pairing.load_runs([older, after])
    assert set(pooled) == {"found"}
    for order in ([before, older, after], [older, before, after]):  # the name alone is not every commit
        with pytest.raises(EvalError, match="differ in model_identity"):
            pairing.load_runs(order)
