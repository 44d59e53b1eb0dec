"""Every JSON file the package reads is strict JSON checked against its record (rope_adapter/records.py): a bare NaN
or Infinity is refused naming the file (and the line of a JSON-lines file); the search report's reader takes every
committed report, older ones included, and nothing looser; JSON a user types on the command line refuses NaN too.
tests/test_layout.py::test_every_json_read_goes_through_the_records_module finds any read that bypasses the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rope_adapter.errors import LrsError, RecordFileError

ROOT = Path(__file__).resolve().parents[2]
NAN = '{"a": NaN}'


def _reports() -> list[Path]:
    return sorted((ROOT / "benchmarks" / "results").rglob("search_report.json"))


@pytest.mark.parametrize("path", _reports(), ids=lambda p: str(p.parent.relative_to(ROOT / "benchmarks" / "results")))
def test_every_committed_search_report_is_read_by_the_typed_reader(path):
    from rope_adapter.cli.demo import read_search_report

    report = read_search_report(path)
    assert report["study"]["sampler"] and "best_uniform" in report["baselines"]


def test_older_reports_are_among_them_and_only_their_missing_fields_are_tolerated(tmp_path):
    """8 committed reports predate ``study.racing`` or ``holdout.search_score``; any other missing field, a wrong
    type or a bare NaN is one RecordFileError naming the file and the field."""
    from rope_adapter.cli.demo import OLDER_REPORT_FIELDS, read_search_report

    texts = {p: json.loads(p.read_text()) for p in _reports()}
    older = [p for p, r in texts.items() if "racing" not in r["study"] or "search_score" not in (r["holdout"] or {})]
    assert len(older) >= 8, older
    report = texts[older[0]]
    cases = [
        (lambda r: r["study"].pop("sampler"), "study.sampler", "is missing"),
        (lambda r: r["timing"].update(workers="2"), "timing.workers", "must be an integer"),
        (lambda r: r["baselines"]["best_uniform"].update(uniform="x"), "baselines.best_uniform.uniform", "must be"),
    ]
    for change, field, problem in cases:
        broken = json.loads(json.dumps(report))
        change(broken)
        path = tmp_path / "search_report.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(RecordFileError) as caught:
            read_search_report(path)
        assert caught.value.file == str(path) and caught.value.field.startswith(field), caught.value
        assert problem in caught.value.problem
    path.write_text(json.dumps(report).replace('"seed": ', '"seed": NaN, "x": ', 1))
    with pytest.raises(RecordFileError, match="is not valid JSON"):
        read_search_report(path)
    assert set(OLDER_REPORT_FIELDS) == {"study.racing", "holdout.search_score"}


def test_a_json_lines_data_file_is_strict_and_the_error_names_the_file_and_the_line(tmp_path):
    from rope_adapter.scoring.tasks import KVRetrievalTask, read_jsonl

    path = tmp_path / "kv.jsonl"
    good = json.dumps({"ordered_kv_records": [["a", "b"], ["c", "d"]]})
    path.write_text(good + "\n" + good.replace('"b"', "NaN") + "\n")
    with pytest.raises(RecordFileError) as caught:
        read_jsonl(path)
    assert (caught.value.file, caught.value.field) == (str(path), "line 2")
    assert str(caught.value).startswith(f"{path}: line 2 is not valid JSON (NaN is not JSON")
    with pytest.raises(RecordFileError, match=r"line 2 is not valid JSON"):
        KVRetrievalTask(data_path=str(path)).load_records()
    assert len(read_jsonl(path, limit=1)) == 1


def _folder(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / name).write_text(text)
    return folder


def _results_table(folder: Path):
    from rope_adapter.scoring.results_table import ResultsTable

    return ResultsTable.read(folder)


def _adapter_config(folder: Path):
    from rope_adapter.config import load_lrs_config

    return load_lrs_config(folder)


def _exported(folder: Path):
    from rope_adapter.export.reading import read_exported_factors

    return read_exported_factors(folder)


def _card_kind(folder: Path):
    from rope_adapter.export.card_data import detect_kind

    return detect_kind(folder)


def _vllm_note(folder: Path):
    from rope_adapter.export.serving import note_vllm_length

    return note_vllm_length(folder)


@pytest.mark.parametrize(
    ("read", "name"),
    [
        (_results_table, "results_table.json"),
        (_adapter_config, "adapter_config.json"),
        (_exported, "config.json"),
        (_card_kind, "adapter_config.json"),
        (_vllm_note, "config.json"),
    ],
    ids=["ResultsTable.read", "load_lrs_config", "read_exported_factors", "detect_kind", "note_vllm_length"],
)
def test_a_bare_nan_is_refused_by_every_reader_naming_the_file(tmp_path, read, name):
    folder = _folder(tmp_path, name, NAN.replace("{", '{"peft_type": "LRS", "lrs_factors": [1.5], ', 1))
    with pytest.raises(LrsError, match="is not valid JSON") as caught:
        read(folder)
    assert str(folder / name) in str(caught.value)


def test_readers_that_recognise_their_own_files_do_not_take_a_file_with_nan(tmp_path):
    """A file that is not strict JSON was not written by rope-adapter: eval does not take it as its own output."""
    from rope_adapter.evaluate.own_outputs import eval_wrote

    folder = _folder(tmp_path, "results.json", '{"kind": "positions", "variants": [], "x": NaN}')
    assert not eval_wrote(folder)
    (folder / "results.json").write_text('{"kind": "positions", "variants": []}')
    assert eval_wrote(folder)


@pytest.mark.parametrize(
    ("text", "value"),
    [("a=1.5", 1.5), ("a=[1, 2]", [1, 2]), ("a=NaN", "NaN"), ("a=[1, Infinity]", "[1, Infinity]"), ("a=x", "x")],
)
def test_json_typed_on_the_command_line_refuses_nan(text, value):
    """``--task-option KEY=VALUE``: VALUE is JSON when it is strict JSON, else the text itself (which the task
    then refuses, naming the option, where it wants a number)."""
    from rope_adapter.cli.settings_flags import key_value

    assert key_value(text) == ("a", value)


@pytest.mark.parametrize("text", ['{"a": NaN}', "[1, Infinity]", "-Infinity", '{"a": 1'])
def test_json_text_that_is_not_strict_json_is_refused_naming_where_it_came_from(text):
    """records.loads_json: a line of a JSON-lines file or of a child process's output (what the benchmarks read)."""
    from rope_adapter.records import loads_json

    with pytest.raises(RecordFileError, match="is not valid JSON") as caught:
        loads_json(text, "the child's stdout", field="line 3")
    assert (caught.value.file, caught.value.field) == ("the child's stdout", "line 3")
    assert str(caught.value).startswith("the child's stdout: line 3 is not valid JSON")
    assert loads_json('{"a": [1, 2.5, null]}', "x") == {"a": [1, 2.5, None]}


def test_a_benchmark_json_lines_file_drops_only_a_torn_last_line(tmp_path, monkeypatch):
    """benchmarks/positions_per_record.py resumes from records.jsonl: a torn last line (an older run killed mid-write)
    is dropped; a bad line before it, or a bare NaN, is a RecordFileError naming the file and the line."""
    from testkit.eval_runs import BENCHMARKS, load_benchmark

    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its neighbour machine_info
    read_jsonl = load_benchmark("positions_per_record").read_jsonl
    path = tmp_path / "records.jsonl"
    path.write_text('{"record": 0}\n{"record": 1}\n{"rec')
    assert read_jsonl(path) == [{"record": 0}, {"record": 1}]
    path.write_text('{"record": 0, "x": NaN}\n{"record": 1}\n')
    with pytest.raises(RecordFileError) as caught:
        read_jsonl(path)
    assert (caught.value.file, caught.value.field) == (str(path), "line 1")
    assert read_jsonl(tmp_path / "missing.jsonl") == []
