"""An interrupted `eval` resumes where it stopped: each variant is scored a part of the records at a time, every
finished part is kept in --out/eval_progress.json, and the same command reads them back. Splitting changes no score,
a stop at any part gives the results of a run that never stopped, and a progress file of another run, or one the
user put there, is never taken for this run's. Tiny random Llama, generated records."""

from __future__ import annotations

import json

import pytest
from testkit.records import key_problems

from rope_adapter.cli import main
from rope_adapter.evaluate import EvalSettings, run_eval, variant_scores
from rope_adapter.evaluate import checkpoint as checkpoint_mod
from rope_adapter.evaluate.checkpoint import PROGRESS_NAME, ProgressFile
from rope_adapter.records import check_record

VARIANTS = "base,uniform:1.5"
SCORE_PART = variant_scores.score_part
RECORDS = 5  # batch size 2, parts of 2 records: 3 parts per variant


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(checkpoint_mod, "PART_RECORDS", 2)


def _settings(model_dir, out, **over):
    common = dict(
        model=str(model_dir), num_pairs=4, num_positions=2, num_samples=RECORDS, device="cpu", progress=False,
        plot=False, batch_size=2, scores="accuracy,tf_accuracy,logprob", seed=3,
    )  # fmt: skip
    return EvalSettings.flat(variants=VARIANTS, out=out, **{**common, **over})


def _table(path):
    return json.loads((path / "results_table.json").read_text())


class Stop(Exception):
    pass


def _stop_at(monkeypatch, at: int | None, calls: list):
    real = SCORE_PART

    def part(model, task, plan, progress):
        calls.append(len(task))
        if len(calls) - 1 == at:
            raise Stop
        return real(model, task, plan, progress)

    monkeypatch.setattr(variant_scores, "score_part", part)


@pytest.fixture(scope="module")
def whole(model_dir, tmp_path_factory):
    """The results of one pass over every record (one part larger than the run)."""
    out = tmp_path_factory.mktemp("whole")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_mod, "PART_RECORDS", 1000)
        run_eval(_settings(model_dir, out), log=lambda s: None)
    return _table(out)


def test_parts_change_no_score(model_dir, tmp_path, small_parts, whole, monkeypatch):
    calls: list = []
    _stop_at(monkeypatch, None, calls)
    run_eval(_settings(model_dir, tmp_path), log=lambda s: None)
    assert len(calls) == 6  # 3 parts x 2 variants
    assert _table(tmp_path) == whole  # every score, prediction and sample row, bit for bit
    assert not (tmp_path / PROGRESS_NAME).exists()  # removed once results.json is written


@pytest.mark.parametrize("stop", range(6))
def test_a_stop_at_any_part_resumes_there_with_the_same_results(
    model_dir, tmp_path, small_parts, whole, monkeypatch, stop
):
    calls: list = []
    _stop_at(monkeypatch, stop, calls)
    with pytest.raises(Stop):
        run_eval(_settings(model_dir, tmp_path), log=lambda s: None)
    assert not (tmp_path / "results.json").exists()
    kept = json.loads((tmp_path / PROGRESS_NAME).read_text()) if stop else None
    if stop:
        assert kept["written_by"] == "rope-adapter eval" and kept["parts"] == 3
        check_record(kept, ProgressFile, PROGRESS_NAME)  # the file is what its typed record says
        assert key_problems(kept, ProgressFile) == []
        assert sum(len(v) for v in kept["variants"].values()) == stop
    calls.clear()
    _stop_at(monkeypatch, None, calls)
    lines: list[str] = []
    run_eval(_settings(model_dir, tmp_path), log=lines.append)
    assert len(calls) == 6 - stop  # only the parts not kept
    assert _table(tmp_path) == whole
    assert (f"parts kept in {PROGRESS_NAME}" in "\n".join(lines)) == (stop > 0)
    assert not (tmp_path / PROGRESS_NAME).exists()
    # without a progress bar, one line a part scored, counting the records kept before too
    scored = [line for line in lines if "records scored" in line]
    assert len(scored) == 6 - stop
    assert sum("5 of 5 records scored (part 3 of 3" in line for line in scored) == (2 if stop < 3 else 1)


def test_progress_of_another_run_is_not_used(model_dir, tmp_path, small_parts, monkeypatch):
    calls: list = []
    _stop_at(monkeypatch, 4, calls)
    with pytest.raises(Stop):
        run_eval(_settings(model_dir, tmp_path, seed=4), log=lambda s: None)  # other records
    calls.clear()
    _stop_at(monkeypatch, None, calls)
    lines: list[str] = []
    run_eval(_settings(model_dir, tmp_path), log=lines.append)
    assert len(calls) == 6 and "another run's progress" in "\n".join(lines)
    fresh = tmp_path / "fresh"
    run_eval(_settings(model_dir, fresh), log=lambda s: None)
    assert _table(tmp_path) == _table(fresh)


def test_the_cli_resumes_and_a_user_file_of_that_name_is_refused(model_dir, tmp_path, small_parts, monkeypatch, capsys):
    args = ["eval", "--model", str(model_dir), "--num-pairs", "4", "--num-positions", "2", "--num-samples", "5"]
    args += ["--variants", VARIANTS, "--no-plot", "--no-progress", "--device", "cpu", "--batch-size", "2"]
    calls: list = []
    _stop_at(monkeypatch, 2, calls)
    with pytest.raises(Stop):
        main([*args, "--out", str(tmp_path / "run")])
    assert (tmp_path / "run" / PROGRESS_NAME).exists()
    _stop_at(monkeypatch, None, calls := [])
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    assert len(calls) == 4
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / PROGRESS_NAME).write_text('{"notes": "my own file"}\n')
    capsys.readouterr()
    assert main([*args, "--out", str(mine)]) == 2
    assert "did not write" in capsys.readouterr().err
    assert (mine / PROGRESS_NAME).read_text() == '{"notes": "my own file"}\n'
    stamped = tmp_path / "stamped"  # eval's progress beside a results.json eval did not write: refused too
    stamped.mkdir()
    (stamped / PROGRESS_NAME).write_text(json.dumps({"written_by": "rope-adapter eval"}))
    (stamped / "results.json").write_text('{"mine": true}\n')
    assert main([*args, "--out", str(stamped)]) == 2
    assert (stamped / "results.json").read_text() == '{"mine": true}\n'


def test_parts_generate_up_to_the_whole_run_s_answer_length(model_dir, tmp_path, monkeypatch):
    """Answers of several lengths (a file's values "v3-1" and "v12-1"): greedy answers from parts of one record are
    the answers of one pass, which generates up to the longest answer of the whole run."""
    from testkit.litm_files import write_kv_file

    data = write_kv_file(tmp_path / "kv.jsonl", num_records=16, num_pairs=3)
    over = dict(data=str(data), num_samples=12, scores="accuracy", batch_size=1)
    monkeypatch.setattr(checkpoint_mod, "PART_RECORDS", 1000)
    run_eval(_settings(model_dir, tmp_path / "whole", **over), log=lambda s: None)
    monkeypatch.setattr(checkpoint_mod, "PART_RECORDS", 1)
    run_eval(_settings(model_dir, tmp_path / "parts", **over), log=lambda s: None)
    samples = [json.loads((tmp_path / d / "results.json").read_text())["samples"] for d in ("parts", "whole")]
    assert samples[0] == samples[1] and all("prediction" in row for row in samples[0])


def _damages(part: dict) -> list[tuple[str, object]]:
    """Every way of damaging one kept part at every place of it: (what, the damaged part)."""
    import copy

    out: list[tuple[str, object]] = [("the part null", None), ("the part a list", []), ("the part empty", {})]
    for key in part:
        for what, value in [("null", None), ("a string", "x"), ("missing", ...)]:
            bad = copy.deepcopy(part)
            if value is ...:
                del bad[key]
            else:
                bad[key] = value
            out.append((f"{key} {what}", bad))
    out.append(("no metric", {**part, "scores": {}}))
    for metric in part["scores"]:
        for what, change in [
            ("one value short", lambda v: v[:-1]),
            ("one value more", lambda v: [*v, 0.0]),
            ("a value null", lambda v: [None, *v[1:]]),
            ("a value a string", lambda v: ["1.0", *v[1:]]),
            ("a value a boolean", lambda v: [True, *v[1:]]),
        ]:
            out.append(
                (f"{metric}: {what}", {**part, "scores": {**part["scores"], metric: change(part["scores"][metric])}})
            )
        rest = {m: v for m, v in part["scores"].items() if m != metric}
        out.append((f"{metric} missing", {**part, "scores": rest}))
    out.append(("one answer short", {**part, "predictions": part["predictions"][:-1]}))
    out.append(("an answer a number", {**part, "predictions": [1, *part["predictions"][1:]]}))
    out.append(("seconds negative", {**part, "seconds": -1.0}))
    return out


def test_a_damaged_progress_file_is_never_read_back(model_dir, tmp_path, small_parts, whole, monkeypatch):
    """Every damage of every place of a kept part (found by walking the real file, not listed by hand) makes the
    file stale: the run starts afresh with a note and gives the uninterrupted run's results, never a traceback."""
    calls: list = []
    _stop_at(monkeypatch, 4, calls)
    with pytest.raises(Stop):
        run_eval(_settings(model_dir, tmp_path), log=lambda s: None)
    kept = json.loads((tmp_path / PROGRESS_NAME).read_text())
    sizes = [4, 4, 2]  # 5 records x 2 positions in parts of 2 records
    for parts in kept["variants"].values():
        assert checkpoint_mod.valid_parts(parts, sizes)
    key, parts = next((k, v) for k, v in kept["variants"].items() if len(v) == 3)
    damages = _damages(parts[1])
    assert len(damages) > 25
    for what, bad in damages:
        assert not checkpoint_mod.valid_parts([parts[0], bad, parts[2]], sizes), what
    assert not checkpoint_mod.valid_parts([*parts, parts[0]], sizes)  # a part more than the run has
    # end to end, two of them: the run starts afresh and its results are those of a run that never stopped
    for what, bad in [damages[0], next(d for d in damages if d[0] == "logprob: one value short")]:
        damaged = {**kept, "variants": {**kept["variants"], key: [parts[0], bad, parts[2]]}}
        (tmp_path / PROGRESS_NAME).write_text(json.dumps(damaged))
        calls.clear()
        _stop_at(monkeypatch, None, calls)
        lines: list[str] = []
        run_eval(_settings(model_dir, tmp_path), log=lines.append)
        assert len(calls) == 6 and "damaged: starting afresh" in "\n".join(lines), what
        assert _table(tmp_path) == whole


def test_parts_kept_by_another_release_are_not_joined(model_dir, tmp_path, small_parts, monkeypatch):
    import transformers

    calls: list = []
    _stop_at(monkeypatch, 4, calls)
    with pytest.raises(Stop):
        run_eval(_settings(model_dir, tmp_path), log=lambda s: None)
    monkeypatch.setattr(transformers, "__version__", "0.0.1")  # an upgrade between the stop and the rerun
    calls.clear()
    _stop_at(monkeypatch, None, calls)
    lines: list[str] = []
    run_eval(_settings(model_dir, tmp_path), log=lines.append)
    assert len(calls) == 6 and "another run's progress" in "\n".join(lines)
