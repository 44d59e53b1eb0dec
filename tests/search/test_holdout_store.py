"""Held-out scores are kept in the study: a resumed or rebuilt search reads them instead of scoring the held-out
records again, an interrupted held-out step keeps what it finished, and other factors are scored afresh."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest
from testkit.searches import small

from rope_adapter.search import holdout as holdout_mod
from rope_adapter.search import holdout_store as hs
from rope_adapter.search import run_search
from rope_adapter.search.worker import make_worker


@pytest.fixture
def counted(monkeypatch):
    """Count the held-out step's scorings of parts (teacher-forced and greedy), optionally failing at scoring
    ``fail_at``."""
    calls = {"computed": 0, "fail_at": None}
    original = holdout_mod.stored_or_scored

    def counting(store, key, factors, task, parts, **kw):
        def counted(compute):
            def counted_compute():
                calls["computed"] += 1
                if calls["computed"] == calls["fail_at"]:
                    raise KeyboardInterrupt
                return compute()

            return counted_compute

        return original(store, key, factors, task, [(part, counted(compute)) for part, compute in parts], **kw)

    monkeypatch.setattr(holdout_mod, "stored_or_scored", counting)
    return calls


def _holdout(report):
    drop = {"seconds"}
    return json.loads(json.dumps({k: v for k, v in report["holdout"].items() if k not in drop}, sort_keys=True))


def _stored(settings):
    study = optuna.load_study(study_name=settings.study.name, storage=settings.storage_url())
    return {k: v for k, v in study.user_attrs.items() if k.startswith(hs.HOLDOUT_ATTR)}


def test_a_rebuilt_search_reads_the_held_out_scores_instead_of_scoring_again(tmp_path, tiny_llama_dir, counted):
    settings = small(tmp_path / "s", tiny_llama_dir, trials=6, holdout_accuracy=True)
    first = run_search(settings).report
    assert set(_stored(settings)) == {
        hs.holdout_key(settings.holdout_records, name, kind)
        for name in ("base", "best_uniform", "found")
        for kind in ("score", "accuracy")
    }
    assert counted["computed"] == 6
    counted.update(computed=0)
    again = run_search(settings).report  # every trial done: only the outputs are rebuilt
    assert counted["computed"] == 0
    assert _holdout(again) == _holdout(first)  # every number, k selection and verdict included


def test_an_interrupted_held_out_step_keeps_what_it_finished(tmp_path, tiny_llama_dir, counted):
    settings = small(tmp_path / "s", tiny_llama_dir, trials=6)
    counted.update(fail_at=2)  # the base scored, then Ctrl-C while the next configuration is scored
    with pytest.raises(KeyboardInterrupt):
        run_search(settings)
    assert list(_stored(settings)) == [hs.holdout_key(settings.holdout_records, "base", "score")]
    counted.update(computed=0, fail_at=None)
    report = run_search(settings).report
    configs = len({tuple(c["factors"]) for c in report["holdout"]["configs"].values()})
    assert counted["computed"] == configs - 1  # the base is read, the others are scored
    assert len(_stored(settings)) == configs


def test_other_factors_or_samples_are_scored_afresh(tmp_path, tiny_llama_dir):
    settings = small(tmp_path / "s", tiny_llama_dir, trials=4)
    worker = make_worker(settings, 0)
    task = worker.holdout
    scored = worker.evaluator.score([1.1] * worker.num_layers, task, keep_logprobs=True)
    kept = json.loads(json.dumps(hs.to_stored(scored, [1.1] * worker.num_layers)))  # as the study's JSON keeps it
    back = hs.from_stored(kept, task)
    assert np.array_equal(back.per_sample, scored.per_sample) and back.by_position == scored.by_position
    for a, b in zip(back.logprobs.values, scored.logprobs.values, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(back.logprobs.exact(), scored.logprobs.exact())
    assert np.array_equal(back.logprobs.min_margin(), scored.logprobs.min_margin())
    assert back.logprobs.samples == list(task.samples)

    class Store:
        user_attrs: dict = {"k": kept}

        def set_user_attr(self, key, value):
            self.user_attrs[key] = value

    def fail():
        raise AssertionError("scored again")

    assert hs.stored_or_scored(Store(), "k", [1.1] * worker.num_layers, task, [(task, fail)]).seconds == scored.seconds
    computed = []
    for factors, samples in (([1.2] * worker.num_layers, len(task)), ([1.1] * worker.num_layers, len(task) + 1)):
        Store.user_attrs = {"k": {**kept, "samples": samples}}
        hs.stored_or_scored(Store(), "k", factors, task, [(task, lambda: computed.append(1) or scored)])
    assert computed == [1, 1]


def test_a_configuration_stopped_inside_resumes_at_its_part_and_parts_join_to_the_whole(
    tmp_path, tiny_llama_dir, counted, monkeypatch
):
    """Held-out records scored one at a time (each part kept): a Ctrl-C inside the second configuration loses only
    its part, and the joined parts give every number one pass over all records gives."""
    from rope_adapter.search import worker as worker_mod

    common = dict(trials=6, holdout_records=3, holdout_accuracy=True, batch_size=1)  # a part = a batch: same passes
    settings = small(tmp_path / "whole", tiny_llama_dir, **common)
    whole = run_search(settings).report
    monkeypatch.setattr(worker_mod, "PART_RECORDS", 1)
    parted = small(tmp_path / "parts", tiny_llama_dir, **common)
    counted.update(computed=0, fail_at=8)  # base: 3 + 3 greedy parts; best uniform: part 2 of its teacher-forced pass
    with pytest.raises(KeyboardInterrupt):
        run_search(parted)
    kept = _stored(parted)
    progress = kept[hs.holdout_key(3, "best_uniform", "score") + ":parts"]
    assert progress["parts"] == 3 and len(progress["done"]) == 1
    counted.update(computed=0, fail_at=None)
    report = run_search(parted).report
    configs = len({tuple(c["factors"]) for c in report["holdout"]["configs"].values()})
    assert counted["computed"] == 2 * 3 * (configs - 1) - 1  # the base read back, the kept part too
    timeless = [_holdout(r) for r in (report, whole)]
    for h in timeless:
        for config in h["configs"].values():
            config.pop("seconds")
    assert timeless[0] == timeless[1]


def test_joined_parts_renumber_answer_form_rows_as_one_pass_does(tmp_path, tiny_llama_dir):
    """Samples with alternative answer forms: every row joined from parts points at the row one pass numbers."""
    from rope_adapter.scoring.shared_prefix import prepare
    from rope_adapter.scoring.tasks import Sample

    worker = make_worker(small(tmp_path / "s", tiny_llama_dir, trials=1), 0, with_holdout=False)
    samples = [
        Sample(
            prefix=f"record {r}, a long shared context. ",
            query=f"key {p}:",
            answers=["a"],
            position=p,
            record_id=str(r),
            target=" a",
            alt_targets=(' "a', " b") if (r + p) % 2 else (),
        )
        for r in range(3)
        for p in range(2)
    ]
    one = prepare(samples, worker.tokenizer)
    pieces = [prepare(samples[i : i + 2], worker.tokenizer) for i in range(0, 6, 2)]
    factors = [1.0] * worker.num_layers
    score = worker.evaluator.score
    joined = hs.join_stored([hs.to_stored(score(factors, p, keep_logprobs=True), factors) for p in pieces], pieces)
    direct = hs.to_stored(score(factors, one, keep_logprobs=True), factors)
    assert joined["logprobs"]["rows"] == direct["logprobs"]["rows"]
    assert [one.full_ids[r] for r in joined["logprobs"]["rows"]] == [
        one.full_ids[r] for r in direct["logprobs"]["rows"]
    ]
    assert joined["per_sample"] == pytest.approx(direct["per_sample"], abs=1e-5)


def test_every_part_generates_up_to_its_whole_set_s_answer_length(tmp_path, tiny_llama_dir, monkeypatch):
    """Answers of several lengths (values "v3-1" and "v12-1"): a part alone would stop generating earlier than one
    pass over the whole set; every part of the held-out, confirmation and racing sets uses the whole's length."""
    from testkit.litm_files import write_kv_file

    from rope_adapter.scoring.shared_prefix import prepare
    from rope_adapter.search import worker as worker_mod

    monkeypatch.setattr(worker_mod, "PART_RECORDS", 1)
    data = write_kv_file(tmp_path / "kv.jsonl", num_records=24, num_pairs=3)
    settings = small(tmp_path / "s", tiny_llama_dir, data=str(data), search_records=12, holdout_records=6, race=[0.5])
    worker = make_worker(settings, 0)
    sets = [(worker.holdout, worker.holdout_parts), (worker.confirm, worker.confirm_parts)]
    sets.append((worker.search, worker.stages))
    shorter = 0
    for whole, parts in sets:
        assert len(parts) > 1
        for part in parts:
            assert part.max_new_tokens == whole.max_new_tokens
            alone = prepare(part.samples, worker.tokenizer, generation_slack=worker.task.generation_slack)
            shorter += alone.max_new_tokens < whole.max_new_tokens
    assert shorter  # without the whole's length some part would generate fewer tokens
