"""Scores kept in the study in parts: a computation stopped at any part resumes at the first part not kept, and the
whole it ends with equals the whole computed without a stop (fault injection at every part)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from rope_adapter.search.kept_scores import PARTS_SUFFIX, kept_or_computed, kept_or_computed_in_parts


class DictStore:
    """A stand-in for an Optuna study's user attributes (JSON values, read back as stored)."""

    def __init__(self) -> None:
        self.attrs: dict[str, object] = {}
        self.writes = 0

    @property
    def user_attrs(self) -> Mapping[str, object]:
        return dict(self.attrs)

    def set_user_attr(self, key: str, value: object) -> None:
        self.attrs[key] = value
        self.writes += 1


class Stop(Exception):
    pass


def _parts(values: list[list[float]], calls: list[int], stop_at: int | None = None):
    def make(i: int):
        def compute() -> list[float]:
            if i == stop_at:
                raise Stop
            calls.append(i)
            return values[i]

        return compute

    return [make(i) for i in range(len(values))]


def _run(store, parts, factors=(1.0, 1.1)):
    return kept_or_computed_in_parts(
        store,
        "confirmation:8:3",
        factors,
        parts,
        combine=lambda vs: [x for v in vs for x in v],
        dump=lambda v: {"sample_scores": list(v)},
        load=lambda saved: list(saved["sample_scores"]),
    )


VALUES = [[0.1, 0.2], [0.3], [0.4, 0.5, 0.6], [0.7]]
WHOLE = [x for v in VALUES for x in v]


@pytest.mark.parametrize("stop_at", range(len(VALUES)))
def test_a_stop_at_any_part_resumes_at_that_part(stop_at):
    store, calls = DictStore(), []
    with pytest.raises(Stop):
        _run(store, _parts(VALUES, calls, stop_at))
    assert calls == list(range(stop_at))
    calls.clear()
    value, fresh = _run(store, _parts(VALUES, calls))
    assert value == WHOLE and fresh
    assert calls == list(range(stop_at, len(VALUES)))  # the parts kept before the stop are not computed again
    assert store.attrs["confirmation:8:3"] == {"sample_scores": WHOLE, "factors": [1.0, 1.1]}
    assert store.attrs["confirmation:8:3" + PARTS_SUFFIX]["done"] == []  # emptied once the whole is kept
    calls.clear()
    assert _run(store, _parts(VALUES, calls)) == (WHOLE, False) and calls == []


def test_kept_parts_of_other_factors_or_another_split_are_not_used():
    store, calls = DictStore(), []
    with pytest.raises(Stop):
        _run(store, _parts(VALUES, calls, 2))
    calls.clear()
    assert _run(store, _parts(VALUES, calls), factors=(1.0, 1.2))[0] == WHOLE
    assert calls == [0, 1, 2, 3]
    store2, calls = DictStore(), []
    with pytest.raises(Stop):
        _run(store2, _parts(VALUES, calls, 2))
    calls.clear()
    assert _run(store2, _parts([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6, 0.7]], calls))[0] == WHOLE  # two parts, not four
    assert calls == [0, 1]


def test_one_part_writes_only_the_whole_and_no_store_always_computes():
    store = DictStore()
    value, fresh = kept_or_computed(store, "k", [1.0], lambda: 5, dump=lambda v: {"v": v}, load=lambda s: s["v"])
    assert (value, fresh) == (5, True) and store.attrs == {"k": {"v": 5, "factors": [1.0]}} and store.writes == 1
    calls: list[int] = []
    assert _run(None, _parts(VALUES, calls)) == (WHOLE, True) and calls == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="no parts"):
        _run(store, [])


def test_on_part_is_told_of_every_part_kept_or_computed():
    store, calls, ticks = DictStore(), [], []

    def run(parts):
        return kept_or_computed_in_parts(
            store,
            "k",
            [1.0],
            parts,
            combine=lambda vs: [x for v in vs for x in v],
            dump=lambda v: {"sample_scores": list(v)},
            load=lambda saved: list(saved["sample_scores"]),
            on_part=ticks.append,
        )

    with pytest.raises(Stop):
        run(_parts(VALUES, calls, 2))
    assert ticks == [True, True]
    ticks.clear()
    run(_parts(VALUES, calls))
    assert ticks == [False, False, True, True]  # two kept, two computed: a bar over parts reaches its total
    ticks.clear()
    run(_parts(VALUES, calls))
    assert ticks == [False] * 4
