"""Every JSON we read is strict JSON checked against its typed record, with one error naming the file and the field;
and the typed records describe what the writers write (every committed adapter's provenance is scanned)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import pytest
from peft import get_peft_model
from testkit.tiny_models import tiny_model

from rope_adapter import LrsConfig
from rope_adapter.errors import LrsError, RecordFileError
from rope_adapter.provenance import Provenance
from rope_adapter.records import check_record, read_json

ROOT = Path(__file__).resolve().parents[2]


class _Inner(TypedDict):
    n: int


class _Outer(TypedDict, total=False):
    name: str
    inner: _Inner
    scores: dict[str, float]
    points: list[list[float]]
    note: str | None


@pytest.mark.parametrize(  # a test table: one row per kind of mismatch, alike in shape by design
    ("text", "field", "problem"),
    [
        ('{"a": NaN}', "", "is not valid JSON"),
        ('{"a": Infinity}', "", "is not valid JSON"),
        ("[1, 2", "", "is not valid JSON"),
        ('{"name": 3}', "name", "must be a str"),
        ('{"inner": {}}', "inner.n", "is missing"),
        ('{"inner": {"n": 1.5}}', "inner.n", "must be an integer"),
        ('{"inner": {"n": true}}', "inner.n", "must be an integer"),
        ('{"scores": {"a": 1, "b": "x"}}', "scores.b", "must be a number"),
        ('{"points": [[0, 1], [1, null]]}', "points[1][1]", "must be a number"),
        ('{"note": 4}', "note", "must be a str"),
        ("[]", "", "must be an object"),
    ],
)
def test_a_file_that_does_not_match_its_record_names_the_file_and_the_field(tmp_path, text, field, problem):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(RecordFileError) as caught:
        read_json(path, _Outer)
    assert caught.value.file == str(path) and caught.value.field == field and problem in str(caught.value)
    assert isinstance(caught.value, LrsError) and str(path) in str(caught.value)


def test_a_matching_file_is_read_and_unknown_keys_are_kept(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"name": "x", "inner": {"n": 2, "extra": 1}, "scores": {"a": 1}, "note": null, "more": [1]}')
    assert read_json(path, _Outer)["more"] == [1]
    path.write_text('{"scores": {"a": null}}')  # a score stored as null (it was not a finite number)
    assert read_json(path, _Outer, null_numbers=True) == {"scores": {"a": None}}
    with pytest.raises(RecordFileError, match="scores.a must be a number, found NoneType"):
        read_json(path, _Outer)


def _committed_adapter_configs() -> list[Path]:
    return sorted(
        [*(ROOT / "benchmarks" / "results").rglob("adapter_config.json"), *(ROOT / "rope_adapter").rglob("*.json")]
    )


def test_every_committed_adapters_provenance_matches_its_typed_record():
    """The search's provenance as written against rope_adapter.provenance.Provenance. This scan found that the
    record said ``differences: {"found-base": {"mean": float}}`` while every search wrote a paired-difference
    object there."""
    configs = [p for p in _committed_adapter_configs() if p.name == "adapter_config.json"]
    assert configs
    for path in configs:
        provenance = read_json(path, dict[str, Any]).get("provenance")
        if provenance is not None:
            check_record(provenance, Provenance, path, "provenance", null_numbers=True)


def test_a_card_of_an_adapter_whose_provenance_has_the_wrong_type_names_the_file_and_field(tmp_path):
    from rope_adapter.export.card_data import read_folder

    folder = tmp_path / "ad"
    get_peft_model(
        tiny_model("llama"), LrsConfig(factors=1.5, provenance={"curve": {"degree": "three"}})
    ).save_pretrained(folder)
    with pytest.raises(RecordFileError, match=r"adapter_config.json: provenance.curve.degree must be an integer"):
        read_folder(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["provenance"] = {"curve": {"degree": 3}}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    assert read_folder(folder).provenance == {"curve": {"degree": 3}}
