"""The whole fault-injection matrix (tests/testkit/faults.py): every `rope-adapter` command on tiny models, under
umasks 077 and 027, with a user's file, folder or symlink already at the output, and with a full disk (ENOSPC),
SIGTERM or SIGINT at the first, middle and last write a clean run of the command makes. Each run is checked for
the invariants (the user's files byte for byte, no temporary left, strict JSON, modes from the umask, exit status
0/2/130 and one line); the test suite runs a seeded sample of the same cells (tests/cli/test_fault_matrix.py).

    .venv/bin/python benchmarks/fault_matrix.py   # -> benchmarks/results/fault_matrix/fault_matrix.{json,md}

``--commands`` limits the commands (e.g. ``--commands card export``); ``--work`` keeps the sandboxes there.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from result_files import RESULTS, result_file
from scrub_paths import scrub
from testkit.faults import COMMANDS, Cell, Runner, make_inputs, matrix, run_cell

from rope_adapter import files
from rope_adapter.records import loads_json


def run_matrix(commands: tuple[str, ...], work: Path, log=print) -> dict:
    """Clean runs first (they give each command's number of writes, so the fault points), then every cell."""
    template = make_inputs(work / "template")
    runs = work / "runs"
    runs.mkdir()
    outcomes = []
    start = time.monotonic()
    with Runner() as runner:
        points = {}
        for command in commands:
            clean = run_cell(Cell(command, 0o022), template, runs, runner)
            points[command] = clean.writes or 0
            outcomes.append(clean)
            log(f"{clean.cell.label}: {clean.writes} writes, {clean.seconds} s, {clean.violations or 'ok'}")
        for cell in matrix(points):
            if cell.command not in commands:
                continue
            outcome = run_cell(cell, template, runs, runner)
            outcomes.append(outcome)
            log(f"{cell.label}: rc {outcome.rc}, {outcome.seconds} s, {outcome.violations or 'ok'}")
    return {
        "commands": list(commands),
        "writes_of_a_clean_run": points,
        "runs": len(outcomes),
        "runs_with_violations": sum(bool(o.violations) for o in outcomes),
        "seconds": round(time.monotonic() - start, 1),
        "python": platform.python_version(),
        "outcomes": [o.to_dict() for o in outcomes],
    }


def markdown(report: dict) -> str:
    rows = report["outcomes"]
    by_status = Counter((r["cell"]["command"], r["rc"]) for r in rows)
    lines = [
        "# Fault-injection matrix",
        "",
        "Every `rope-adapter` command on tiny models (`benchmarks/fault_matrix.py`, cells from `tests/testkit/faults.py`):",
        "umasks 077 and 027, a user's file / folder / symlink at the output, and a full disk (ENOSPC), SIGTERM or",
        "SIGINT at the first, middle and last write of a clean run. Invariants checked after each run: the user's",
        "files byte for byte, no temporary left, strict JSON, modes from the umask, exit status 0/2/130 and one line.",
        "",
        f"{report['runs']} runs, {report['runs_with_violations']} with a violation, {report['seconds']} s.",
        "",
        "| command | writes (clean run) | runs | status 0 | status 2 | status 130 | violations |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for command in report["commands"]:
        mine = [r for r in rows if r["cell"]["command"] == command]
        lines.append(
            f"| {command} | {report['writes_of_a_clean_run'].get(command, '')} | {len(mine)} | "
            f"{by_status[(command, 0)]} | {by_status[(command, 2)]} | {by_status[(command, 130)]} | "
            f"{sum(bool(r['violations']) for r in mine)} |"
        )
    bad = [r for r in rows if r["violations"]]
    lines += ["", "## Violations", ""]
    lines += [f"- `{r['label']}`: {'; '.join(r['violations'])}" for r in bad] or ["None."]
    lines += [
        "",
        "## Every run",
        "",
        "| cell | status | writes | fault fired | last line of stderr |",
        "|---|---:|---:|---|---|",
    ]
    for r in rows:
        message = r["message"].replace("|", "\\|")[:140]
        lines.append(f"| {r['label']} | {r['rc']} | {r['writes']} | {r['fired']} | {message} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    parser.add_argument("--work", type=Path, default=None, help="keep the sandboxes in this (new) folder")
    parser.add_argument(
        "--name", default="fault_matrix", help="result folder under benchmarks/results/ (and file name)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        report = run_matrix(tuple(args.commands), work)
    folder = RESULTS / args.name
    folder.mkdir(parents=True, exist_ok=True)
    text = scrub(files.dumps_json(report, where="fault matrix report"), [str(work)])  # no local paths
    report = loads_json(text, "fault matrix report")
    files.write_json(result_file(folder, ".json"), report)
    files.write_text(result_file(folder, ".md"), markdown(report))
    print(f"{report['runs']} runs, {report['runs_with_violations']} with a violation -> {result_file(folder, '.md')}")
    return 1 if report["runs_with_violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
