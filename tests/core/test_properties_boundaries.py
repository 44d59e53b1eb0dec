"""Every class of the public API that takes a number takes it in any number type, or refuses it with an LrsError.

The classes are not listed by hand: every public dataclass of the installed packages (``rope_adapter``,
``rope_adapter.search``, ``rope_adapter.export`` and their modules; the registered tasks among them) with an
``int`` or ``float`` field is found by introspection, and each numeric field is given, with Hypothesis, the same
number as a Python number, a numpy scalar, a 0-d array, a 0-d tensor, a ``Fraction`` and a ``Decimal`` (the result
must equal the plain number's: the same object, or the same refusal) and values that are not numbers (booleans,
NaN, infinities, text, non-whole numbers for whole ones: an :class:`~rope_adapter.errors.LrsError` naming the
field, never another exception, a truncation or a stored boolean). A dataclass that is not an input (a result, a
record read from a file, an internal step) is listed in :data:`NOT_INPUTS` with the reason; a new one must be
checked here or listed there.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit.properties import SETTINGS, int_forms, real_forms
from transformers import PretrainedConfig

from rope_adapter.errors import LrsError

PACKAGES = ("rope_adapter", "rope_adapter.search", "rope_adapter.export")
SKIPPED_MODULES = {
    "rope_adapter.cli": "the command line: its flags become these classes through cli_int and cli_float",
    "rope_adapter.vllm": "needs vLLM (not installed here); its numbers come from an exported folder's config",
}
NOT_INPUTS = {  # "module.Class" -> why its numbers are not a user's input
    "rope_adapter.architectures.RopeSite": "found in a model's module tree, never made by a user",
    "rope_adapter.embedded.registry.EmbeddedModel": "the catalogue of embedded models (constants in the code)",
    "rope_adapter.evaluate.evaluation.PositionResults": "a result of an evaluation",
    "rope_adapter.evaluate.extrapolation.LengthResults": "a result of an evaluation",
    "rope_adapter.evaluate.results.SweepResults": "what the position and length sweeps share (results)",
    "rope_adapter.evaluate.sensitivity.Sensitivity": "a result of the analysis",
    "rope_adapter.evaluate.variant_scores.ScoringPlan": "made by plan_parts inside an evaluation from checked settings",
    "rope_adapter.files.Staged": "a temporary file of rope_adapter.files (its mode comes from the kernel)",
    "rope_adapter.scoring.intervals.Interval": "a computed confidence interval",
    "rope_adapter.scoring.intervals.Difference": "a computed paired difference",
    "rope_adapter.scoring.logprobs.TokenLogprobs": "scores of a forward pass",
    "rope_adapter.scoring.results_table.Cell": "a cell of a results table (read with ResultsTable.read)",
    "rope_adapter.scoring.results_table.Diff": "a difference of a results table (read with ResultsTable.read)",
    "rope_adapter.scoring.results_table.TableVariant": "a row of a results table (read with ResultsTable.read)",
    "rope_adapter.scoring.results_table.ResultsTable": "a results table, read from its file with ResultsTable.read",
    "rope_adapter.scoring.shared_prefix.PrefixGroup": "token ids of the shared-prefix scorer",
    "rope_adapter.scoring.shared_prefix.TokenizedTask": "token ids of the shared-prefix scorer",
    "rope_adapter.scoring.tasks.base.Sample": "made by a task from its records",
    "rope_adapter.scoring.variants.AdapterPlan": "made by check_variants from an adapter folder",
    "rope_adapter.tables.FactorPlan": "the factor tables of a model, made by the adapter",
    "rope_adapter.search.k_selection.KSelection": "a result of the search",
    "rope_adapter.search.objective.Scored": "a result of one trial",
    "rope_adapter.search.racing.RaceCheck": "a result of a racing step",
    "rope_adapter.search.study.SearchResult": "a result of the search",
    "rope_adapter.search.worker.Worker": "a search worker, made by the study from checked settings",
    "rope_adapter.export.bake.ExportResult": "a result of an export",
    "rope_adapter.export.card_data.FolderInfo": "read from a folder's files (rope_adapter.records)",
}

_NUMBER = re.compile(r"\b(int|float)\b")


def _public_dataclasses() -> dict[str, type]:
    """Every public dataclass defined in the packages, with at least one numeric ``__init__`` field."""
    found: dict[str, type] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package, *(i.name for i in pkgutil.walk_packages(root.__path__, package + "."))]
        for name in names:
            if name.endswith("__main__") or any(name == s or name.startswith(s + ".") for s in SKIPPED_MODULES):
                continue
            module = importlib.import_module(name)
            for attr, obj in vars(module).items():
                if attr.startswith("_") or not inspect.isclass(obj) or obj.__module__ != module.__name__:
                    continue
                if dataclasses.is_dataclass(obj) and not _is_transformers_config(obj) and _numeric_fields(obj):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def _numeric_fields(cls: type) -> list[tuple[str, str]]:
    """(field, kind) for each ``__init__`` field whose annotation names int or float; kind is ``int``, ``real``,
    ``ints`` or ``reals`` (a container of them)."""
    out = []
    for f in dataclasses.fields(cls):
        text = str(f.type)
        if not f.init or not _NUMBER.search(text):
            continue
        scalar = re.search(r"(?:^|\|)\s*(int|float)\s*(?:\||$)", text)
        container = re.search(r"(?:Sequence|list|tuple)\[(int|float)\b", text)
        match = scalar or container
        if match is None:  # a mapping holding numbers, say: no input class may have one (tested below)
            out.append((f.name, "other"))
            continue
        kind = {"int": "int", "float": "real"}[match.group(1)]
        out.append((f.name, kind if scalar else kind + "s"))
    return out


def _is_transformers_config(cls: type) -> bool:
    """The standalone model configs are transformers' classes: their numbers are transformers' (only the LRS
    factors in them are ours, and they go through validate_factors)."""
    return issubclass(cls, PretrainedConfig)


FOUND = _public_dataclasses()
INPUTS = {k: v for k, v in FOUND.items() if k not in NOT_INPUTS}


def _bases(folder: Path) -> dict[str, dict[str, Any]]:
    """The other arguments a class needs to be made (files it checks for, a search space)."""
    from rope_adapter.search.bezier import BezierSpace

    text = folder / "text.txt"
    text.write_text("some words " * 400)
    nq = folder / "nq.jsonl"
    nq.write_text('{"question": "q", "answers": ["a"], "ctxs": [{"title": "t", "text": "x", "isgold": true}]}\n')
    return {
        "rope_adapter.scoring.tasks.mdqa.MDQATask": {"data_path": str(nq)},
        "rope_adapter.scoring.tasks.perplexity.PerplexityTask": {"data_path": str(text)},
        "rope_adapter.scoring.variants.Variant": {"name": "v"},
        "rope_adapter.search.constraints.FactorConstraints": {"space": BezierSpace(), "num_layers": 8},
        "rope_adapter.search.constraints.LayerBound": {"first": 0, "last": 2, "low": 1.0, "high": 1.5},
    }


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, dict[str, Any]]:
    return _bases(tmp_path_factory.mktemp("inputs"))


CASES = [
    (key, name, kind) for key, cls in sorted(INPUTS.items()) for name, kind in _numeric_fields(cls) if kind != "other"
]


def _functions() -> dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, str]]]:
    """Public functions that take the same numbers: name -> (function, other arguments, {argument: kind})."""
    from rope_adapter.export.staging import check_export_options
    from rope_adapter.factors import validate_factors
    from rope_adapter.scoring.tasks import check_positions, evenly_spaced_positions, split_records

    return {
        "check_export_options": (
            check_export_options,
            {"atol": None, "max_shard_size": None},
            {"atol": "real", "max_shard_size": "int", "probe_length": "int"},
        ),
        "validate_factors": (
            validate_factors,
            {"factors": 1.5, "num_layers": 4},
            {"factors": "reals", "num_layers": "int"},
        ),
        "check_positions": (
            check_positions,
            {"positions": [0, 1], "num_slots": 4, "what": "slots"},
            {"positions": "ints", "num_slots": "int"},
        ),
        "evenly_spaced_positions": (evenly_spaced_positions, {"num_slots": 10}, {"num_slots": "int", "count": "int"}),
        "split_records": (
            split_records,
            {"records": list(range(9)), "n_search": 3, "n_holdout": 2},
            {"n_search": "int", "n_holdout": "int", "seed": "int"},
        ),
    }


FUNCTIONS = _functions()
CASES += [(f"function {name}", arg, kind) for name, (_, _, args) in FUNCTIONS.items() for arg, kind in args.items()]


def _make(key: str, name: str, value: Any, bases: dict[str, dict[str, Any]]) -> Any:
    if key.startswith("function "):
        function, base, _ = FUNCTIONS[key.removeprefix("function ")]
        return function(**{**base, name: value})
    return INPUTS[key](**{**bases.get(key, {}), name: value})


def _outcome(key: str, name: str, value: Any, bases: dict[str, dict[str, Any]]) -> tuple[str, Any]:
    """("made", the object) or ("refused", the LrsError); any other exception fails the test."""
    try:
        return "made", _make(key, name, value, bases)
    except LrsError as exc:
        return "refused", exc


def _plain(value: Any) -> bool:
    """A plain Python number (or None), or a list or tuple of them, as every class keeps its numbers."""
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or (type(value) in (int, float))


def _kept(made: Any, name: str) -> Any:
    return made if not dataclasses.is_dataclass(made) else getattr(made, name)


def _plain_values(kind: str) -> st.SearchStrategy:
    whole = st.integers(-2, 40)
    real = st.floats(-1.0, 40.0, allow_nan=False).map(lambda x: round(x, 3))
    return {
        "int": whole,
        "real": st.one_of(real, st.integers(0, 40).map(float)),
        "ints": st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True),
        "reals": st.lists(st.floats(0.5, 3.0).map(lambda x: round(x, 3)), min_size=1, max_size=3),
    }[kind]


def _forms(kind: str, plain: Any) -> st.SearchStrategy:
    one = int_forms if kind.startswith("int") else real_forms
    if kind in ("int", "real"):
        return st.sampled_from(one(plain))
    items = st.tuples(*(st.sampled_from(one(v)) for v in plain))  # a list or tuple of numbers in any type
    arrays = [np.array(plain), torch.tensor(plain)]  # or a 1-D array or tensor (int64 or float64)
    if kind == "reals":
        arrays += [np.array(plain, dtype=np.float32), torch.tensor(plain, dtype=torch.float32)]
        arrays = [a for a in arrays if a.tolist() == plain]  # only where the dtype holds the numbers exactly
    return st.one_of(items.map(list), items, st.sampled_from(arrays))


FEW_EACH = settings(SETTINGS, max_examples=12)


@pytest.mark.parametrize(("key", "name", "kind"), CASES, ids=[f"{k.rsplit('.', 1)[-1]}.{n}" for k, n, _ in CASES])
@FEW_EACH
@given(data=st.data())
def test_a_number_in_any_type_gives_what_the_plain_number_gives(bases, key, name, kind, data):
    plain = data.draw(_plain_values(kind), label="plain")
    form = data.draw(_forms(kind, plain), label="form")
    got, want = _outcome(key, name, form, bases), _outcome(key, name, plain, bases)
    assert got[0] == want[0], (got, want)
    if got[0] == "refused":  # the same refusal (its message may show the value as it was given)
        assert type(got[1]) is type(want[1]), (got, want)
        return
    assert got[1] == want[1]
    assert _plain(_kept(got[1], name)), _kept(got[1], name)


NOT_NUMBERS = st.one_of(
    st.sampled_from([True, False, np.bool_(True), torch.tensor(False)]),
    st.sampled_from([math.nan, -math.inf, math.inf, np.float32("nan"), Decimal("NaN"), torch.tensor(math.inf)]),
    st.sampled_from(["3", "", " 7 ", "1e3", b"2", "nan", 1 + 2j, object(), Decimal("Infinity")]),
    st.just(Fraction(10**400, 3)),
)
NOT_WHOLE = st.sampled_from([2.5, np.float64(0.5), Fraction(7, 2), Decimal("1.25"), torch.tensor(3.5)])


@pytest.mark.parametrize(("key", "name", "kind"), CASES, ids=[f"{k.rsplit('.', 1)[-1]}.{n}" for k, n, _ in CASES])
@FEW_EACH
@given(data=st.data())
def test_what_is_not_a_number_is_an_lrs_error_naming_the_argument(bases, key, name, kind, data):
    bad = data.draw(st.one_of(NOT_NUMBERS, NOT_WHOLE) if kind.startswith("int") else NOT_NUMBERS, label="bad")
    if kind in ("ints", "reals"):
        bad = data.draw(st.sampled_from([bad, [bad], [1, bad]]), label="as")
    outcome = _outcome(key, name, bad, bases)
    assert outcome[0] == "refused", f"{key}.{name}={bad!r} was taken: {_kept(outcome[1], name)!r}"
    message = str(outcome[1])
    assert name in message or "--" + name.replace("_", "-") in message, message


def test_every_input_class_is_found_and_made(tmp_path):
    """The registered tasks and every numeric dataclass the packages export are among the classes checked (or
    listed as not inputs); each class checked is made from its defaults; every class listed is still in the code."""
    from rope_adapter.scoring.tasks import available_tasks, get_task

    for name in available_tasks():
        cls = get_task(name)
        assert f"{cls.__module__}.{cls.__qualname__}" in INPUTS, name
    exported = {
        f"{obj.__module__}.{obj.__qualname__}"
        for package in (*PACKAGES, "rope_adapter.evaluate", "rope_adapter.scoring.tasks")
        for obj in (getattr(importlib.import_module(package), n) for n in importlib.import_module(package).__all__)
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and _numeric_fields(obj)
    }
    assert exported <= set(INPUTS) | set(NOT_INPUTS), exported - set(INPUTS) - set(NOT_INPUTS)
    assert {"rope_adapter.config.LrsConfig", "rope_adapter.search.settings.SearchSettings"} <= set(INPUTS)
    gone = [
        k
        for k in NOT_INPUTS
        if not inspect.isclass(getattr(importlib.import_module(k.rsplit(".", 1)[0]), k.rsplit(".", 1)[1], None))
    ]
    assert not gone, f"classes listed as not inputs that are no longer in the code: {gone}"
    unclassified = [f"{k}.{n}" for k, cls in INPUTS.items() for n, kind in _numeric_fields(cls) if kind == "other"]
    assert not unclassified, f"numeric fields of another shape, not checked here: {unclassified}"
    bases = _bases(tmp_path)
    for key, cls in INPUTS.items():
        cls(**bases.get(key, {}))
