"""search_report.json and what a trial stores in the study, as their writers write them and as their typed records
say (search/report_types.py, search/trial_info.py, search/confirm.py,
search/holdout_store.py, search/kept_scores.py): a small search on the tiny model and every
committed search_report.json hold exactly the keys their records name, and the readers (the Markdown summary, the
held-out results record) read them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest
from testkit.records import key_problems
from testkit.searches import load_trials, small

from rope_adapter.records import check_record, read_json
from rope_adapter.search import run_search
from rope_adapter.search.confirm import CONFIRM_ATTR, ConfirmationScores
from rope_adapter.search.holdout_store import HOLDOUT_ATTR, StoredScored
from rope_adapter.search.kept_scores import PARTS_SUFFIX, KeptParts
from rope_adapter.search.report_md import markdown_summary
from rope_adapter.search.report_types import SearchReport
from rope_adapter.search.results_record import holdout_table
from rope_adapter.search.storage import TRIAL_ATTR
from rope_adapter.search.trial_info import TrialInfo

ROOT = Path(__file__).resolve().parents[2]


def _committed() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*search_report.json"], cwd=ROOT, capture_output=True, text=True)
    return [ROOT / p for p in listed.stdout.split()]


@pytest.fixture(scope="module")
def searched(tmp_path_factory, model_dir):
    # more confirmation and held-out records than one part holds: the study keeps their parts too
    settings = small(tmp_path_factory.mktemp("search") / "out", model_dir, confirm_records=6, holdout_records=5)
    result = run_search(settings)
    assert result.adapter_dir is not None
    return settings


def test_the_search_writes_its_report_as_its_record_says(searched):
    path = Path(searched.out) / "search_report.json"
    report = read_json(path, SearchReport, null_numbers=True)
    assert key_problems(report, SearchReport) == []
    assert report["holdout"] and report["confirmation"] and report["trials"]
    assert markdown_summary(report).startswith("# Search report: ")
    assert [v.name for v in holdout_table(report).variants] == list(report["holdout"]["configs"])


def test_every_trial_stores_its_info_as_its_record_says(searched):
    trials = load_trials(searched)
    assert trials
    for trial in trials:
        info = trial.user_attrs[TRIAL_ATTR]
        check_record(info, TrialInfo, f"trial {trial.number}", null_numbers=True)
        assert key_problems(info, TrialInfo) == [], trial.number
    loaded = optuna.load_study(study_name=searched.study.name, storage=searched.storage_url())
    kinds = {CONFIRM_ATTR: ConfirmationScores, HOLDOUT_ATTR: StoredScored}
    seen = set()
    for key, value in loaded.user_attrs.items():
        prefix = key.split(":")[0]
        if prefix not in kinds:
            continue
        record = KeptParts if key.endswith(PARTS_SUFFIX) else kinds[prefix]
        check_record(value, record, key)
        assert key_problems(value, record) == [], key
        seen.add((prefix, record))
    assert seen == {(p, r) for p, r in kinds.items()} | {(p, KeptParts) for p in kinds}


@pytest.mark.parametrize("path", _committed(), ids=lambda p: p.parent.relative_to(ROOT / "benchmarks").as_posix())
def test_every_committed_search_report_matches_its_record_and_reads(path):
    report = read_json(path, SearchReport, null_numbers=True)
    assert key_problems(report, SearchReport) == []
    assert markdown_summary(report).startswith("# Search report: ")
    if (report.get("holdout") or {}).get("configs"):
        holdout_table(report)
