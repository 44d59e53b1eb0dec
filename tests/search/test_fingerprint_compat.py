"""Every study under benchmarks/results/ resumes: settings rebuilt from its search_report.json ("settings") or from the
settings the study stored give exactly the stored fingerprint (byte for byte where the study holds every entry), and
the storage accepts them. A study still being written is read through a snapshot; nothing under benchmarks/ changes.
"""

from __future__ import annotations

import json
import math
import shlex
import sqlite3
from pathlib import Path

import pytest

from rope_adapter.identity import is_older_form
from rope_adapter.search import SearchSettings
from rope_adapter.search.fingerprint import read_stored_fingerprint, study_fingerprint
from rope_adapter.search.samplers import LEGACY_SAMPLER
from rope_adapter.search.storage import SETTINGS_ATTR, check_existing_study
from rope_adapter.search.storage_url import open_storage

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
STUDIES = sorted(RESULTS.glob("**/study.db"))
REPORT_ONLY = ("storage", "constraints")
"""search_report.json "settings" entries that are no setting to rebuild (the storage is the study's own file)."""


def _snapshot(db: Path, copy: Path) -> Path:
    """A consistent copy of a study file (SQLite's backup: safe while another process writes the study)."""
    source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return copy


def _stored(db: Path) -> list[tuple[str, str]]:
    """(study name, the stored settings as the JSON text Optuna wrote) of every study in the file."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT s.study_name, a.value_json FROM studies s JOIN study_user_attributes a USING (study_id) "
            "WHERE a.key = ?",
            (SETTINGS_ATTR,),
        ).fetchall()
    finally:
        con.close()


def _race(ends: list[int], records: int) -> tuple[float, ...]:
    """Racing shares that give these stage ends (each end's share, a little below it: ceil lands on the end)."""
    return tuple((end - 0.5) / records for end in ends[:-1])


def flat_from_fingerprint(stored: dict) -> dict:
    """Settings (flat keywords) that a study with this stored fingerprint was made with."""
    stored = read_stored_fingerprint(stored)
    assert stored["data"] is None and stored["perplexity"] is None and not stored["user_constraints"], (
        "a committed study with a data file, a perplexity guard or constraints: rebuild those here too"
    )
    space = stored["space"]
    return {
        "model": stored["model"],
        "tokenizer": stored["tokenizer"],
        "task": stored["task"],
        "pairs": stored["pairs"],
        "positions": stored["positions"],
        "num_positions": stored["num_positions"],
        "task_options": stored["task_options"],
        "search_records": stored["search_records"],
        "holdout_records": stored["holdout_records"],
        "data_seed": stored["data_seed"],
        "chat_template": stored["chat_template"],
        "score": stored["score"],
        "k": stored["k"],
        "objective": stored["objective"],
        "position_weights": stored["position_weights"],
        "worst_weight": stored["worst_weight"],
        **{name: space[name] for name in ("degree", "x_mode", "s_min", "s_max", "margin", "endpoint_margin")},
        "layer_bounds": tuple(stored["layer_bounds"]),
        "max_step": stored["max_step"],
        "uniform": stored["uniform"],
        "race": _race(stored["race"]["ends"], stored["search_records"]),
        "race_z": stored["race"]["z"],
        "sampler": stored["sampler"],
    }


def flat_from_report(report: dict) -> dict:
    """The settings a search_report.json records, as flat keywords (a report made before ``endpoint_margin`` or
    ``sampler`` were settings: the values its study was made with)."""
    flat = {k: v for k, v in report.items() if k not in REPORT_ONLY}
    flat.setdefault("endpoint_margin", True)
    flat.setdefault("sampler", LEGACY_SAMPLER)
    return {k: tuple(v) if isinstance(v, list) and k in ("layer_bounds", "race") else v for k, v in flat.items()}


def make_settings(flat: dict) -> SearchSettings:
    return SearchSettings.flat(**flat)


def _sources(db: Path, stored: dict) -> dict[str, dict]:
    sources = {"stored settings": flat_from_fingerprint(stored)}
    report = db.parent / "search_report.json"
    if report.is_file():
        sources["search_report.json"] = flat_from_report(json.loads(report.read_text())["settings"])
    return sources


def test_every_committed_study_is_checked():
    names = {p.relative_to(RESULTS).parent.as_posix() for p in STUDIES}
    assert {"search_qwen_50pairs", "search_smollm2_10pairs", "racing_smollm2-135m-instruct/racing"} <= names


@pytest.mark.parametrize("db", STUDIES, ids=lambda p: p.relative_to(RESULTS).parent.as_posix())
def test_settings_rebuild_the_stored_fingerprint(db, tmp_path):
    copy = _snapshot(db, tmp_path / "study.db")
    studies = _stored(copy)
    assert studies, f"{db} holds no rope-adapter study"
    storage = open_storage(f"sqlite:///{copy}")
    for name, raw in studies:
        stored = json.loads(raw)
        for source, flat in _sources(db, stored).items():
            fingerprint = study_fingerprint(make_settings(flat), stored["dtype"])
            assert fingerprint == read_stored_fingerprint(stored, fingerprint), (db, name, source)
            if read_stored_fingerprint(stored) == stored:  # a study holding every entry: the very same bytes,
                # its models named as it recorded them (an older form: the alias of an embedded model)
                older = {k: stored[k] for k in ("model", "tokenizer") if is_older_form(stored[k], fingerprint[k])}
                assert json.dumps({**fingerprint, **older}) == raw, (db, name, source)
            assert check_existing_study(storage, name, fingerprint), (db, name, source)


def test_race_shares_rebuild_their_ends():
    from rope_adapter.search.racing import MIN_STAGE_RECORDS, stage_ends

    for records in range(1, 80):
        for ends in ([records], [math.ceil(0.2 * records), records], [4, 8, records]):
            if sorted(set(ends)) != ends or (len(ends) > 1 and ends[0] < MIN_STAGE_RECORDS):
                continue
            assert stage_ends(records, _race(ends, records)) == ends


def test_the_same_settings_give_the_same_fingerprint_however_they_are_written():
    """Parts or flat keywords, a task's other spelling, a chat switch or its word, a task setting as its own field
    or as a task option: one study."""
    from rope_adapter.search import ModelSettings, ObjectiveSettings, SpaceSettings, StudySettings, TaskSettings

    flat = SearchSettings.flat(
        model="smollm2-135m-instruct",
        task="kv-retrieval",
        pairs=10,
        data_seed=3,
        chat_template=False,
        s_min=0.9,
        s_max=1.2,
        sampler="gp",
        objective="pareto",
    )
    composed = SearchSettings(
        model=ModelSettings(name="smollm2-135m-instruct"),
        task=TaskSettings(name="kv_retrieval", pairs=10, seed=3, chat_template="off"),
        objective=ObjectiveSettings(kind="pareto"),
        space=SpaceSettings(s_min=0.9, s_max=1.2),
        study=StudySettings(sampler="gp"),
    )
    assert composed == flat
    assert json.dumps(study_fingerprint(composed, "float32")) == json.dumps(study_fingerprint(flat, "float32"))
    passkey = SearchSettings.flat(task="passkey", num_filler=60, sampler="gp")
    as_option = SearchSettings.flat(task="passkey", task_options={"num_filler": 60}, sampler="gp")
    assert study_fingerprint(passkey, "float32") == study_fingerprint(as_option, "float32")
    # a part left to the command gets the search's own defaults (the number of gold positions: the task's own)
    alone = SearchSettings(task=TaskSettings(name="passkey"), study=StudySettings(sampler="gp"))
    assert study_fingerprint(alone, "float32")["pairs"] == 20 and alone.task.num_positions is None


def _readme_command(folder: Path) -> list[str] | None:
    """The ``rope-adapter search`` command line a study's README records (its flags), or None."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if "rope-adapter search " in line), None)
    if start is None:
        return None
    text = ""
    for line in lines[start:]:
        text += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            break
    words = shlex.split(text)
    return words[words.index("search") + 1 :]


COMMANDS = [db for db in STUDIES if _readme_command(db.parent) is not None]


def test_the_recorded_commands_are_checked():
    assert {db.parent.name for db in COMMANDS} >= {"search_qwen_50pairs", "search_smollm2_10pairs"}


@pytest.mark.parametrize("db", COMMANDS, ids=lambda p: p.relative_to(RESULTS).parent.as_posix())
def test_the_command_a_study_records_resumes_it(db, tmp_path):
    """The command line in the study's README, parsed by today's CLI (the running study's included), gives the
    fingerprint the study stores (dtype as the CLI resolves it on a CPU, the sampler as a resumed study's; a study
    made before --endpoint-margin existed resumes with it, as its refusal says)."""
    from rope_adapter.cli.search import settings_from_argv
    from rope_adapter.scoring.loading import resolve_dtype
    from rope_adapter.search.storage import resolve_sampler

    copy = _snapshot(db, tmp_path / "study.db")
    storage = open_storage(f"sqlite:///{copy}")
    ((name, raw),) = _stored(copy)
    argv = _readme_command(db.parent)
    if "endpoint_margin" not in json.loads(raw)["space"]:  # made before the setting: resumes with it, as told
        argv.append("--endpoint-margin")
    settings = settings_from_argv(argv)
    assert name == settings.study.name
    settings = resolve_sampler(settings, storage)
    dtype = str(resolve_dtype(settings.model.dtype, "cpu")).removeprefix("torch.")
    fingerprint = study_fingerprint(settings, dtype)
    assert fingerprint == read_stored_fingerprint(json.loads(raw), fingerprint)
    assert check_existing_study(storage, name, fingerprint)


def test_the_built_in_perplexity_text_never_changes():
    """A study's fingerprint names the perplexity guard's built-in text "built-in", not by its content: another
    text in a later release would resume a guarded study with another guard. If it is meant, record the text by its
    sha256 in the fingerprint (with the older form completed, as the model's) and pin the new digest here."""
    import hashlib

    from rope_adapter.search.data import DEFAULT_PERPLEXITY_TEXT

    digest = hashlib.sha256(DEFAULT_PERPLEXITY_TEXT.encode()).hexdigest()
    assert digest == "6157f4846ed78c20917c17ed6a25248c692cf0e90291f7bba5570d247fdc1119"
