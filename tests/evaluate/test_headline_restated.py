"""The README's and the results page's headline tables restate the pooled rows that
``benchmarks/pooled_headline.py`` wrote: every number in them (records, the three accuracies, both differences and
their intervals) is one of those rows, copied right; a restatement that is not can not land."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POOLED = ROOT / "benchmarks" / "results" / "pooled_headline" / "pooled_headline.md"
HEADLINES = [ROOT / "README.md", ROOT / "docs" / "results.md"]

Row = tuple[int, str, str, str, str, str]  # records, base, best uniform, found, found - best uniform, found - base


def _cells(line: str) -> list[str]:
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]


def pooled_rows(text: str) -> set[Row]:
    """The "all sets pooled" row of every table of pooled_headline.md."""
    rows = set()
    for line in text.splitlines():
        cells = _cells(line) if line.startswith("| **all sets pooled**") else []
        if cells:
            rows.add((int(cells[1]), cells[2], cells[3], cells[4], cells[5], cells[6]))
    return rows


def headline_rows(text: str) -> list[tuple[str, Row]]:
    """Every row of a headline table (its header starts ``| model | prompt length | held-out records |``): the
    best uniform's factor and a note after a difference are left out, a difference given without its interval is
    its value alone."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("| model | prompt length | held-out records |"):
            inside = True
            continue
        if not inside or line.startswith("|---"):
            continue
        if not line.startswith("|"):
            inside = False
            continue
        cells = _cells(line)
        records = int(re.match(r"\d+", cells[2]).group())
        best_uniform = cells[4].split(" (")[0]
        diffs = [re.sub(r"\s*\((?!\[).*\)$", "", c) for c in cells[6:8]]
        rows.append((line, (records, cells[3], best_uniform, cells[5], *diffs)))
    return rows


def _matches(row: Row, pooled: Row) -> bool:
    """Equal, a difference given without its interval matching the pooled value."""
    return row[:4] == pooled[:4] and all(
        mine == theirs or ("[" not in mine and theirs.split(" [")[0] == mine)
        for mine, theirs in zip(row[4:], pooled[4:], strict=True)
    )


def test_the_headline_tables_restate_the_pooled_rows():
    pooled = pooled_rows(POOLED.read_text())
    assert len(pooled) >= 4
    for path in HEADLINES:
        rows = headline_rows(path.read_text())
        assert len(rows) >= 4, f"{path.name}: no headline table found"
        wrong = [line for line, row in rows if not any(_matches(row, p) for p in pooled)]
        assert not wrong, f"{path.relative_to(ROOT)}: rows that no pooled row of {POOLED.name} gives:\n" + "\n".join(
            wrong
        )


def test_a_number_copied_wrong_is_found():
    pooled = pooled_rows(POOLED.read_text())
    line, row = headline_rows((ROOT / "README.md").read_text())[0]
    assert any(_matches(row, p) for p in pooled)
    for i in range(len(row)):
        changed = list(row)
        changed[i] = changed[i] + 1 if isinstance(changed[i], int) else changed[i].replace("0", "9", 1)
        assert changed[i] != row[i]
        assert not any(_matches(tuple(changed), p) for p in pooled), (i, changed)
