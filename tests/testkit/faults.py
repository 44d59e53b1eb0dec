"""The fault-injection harness: every `rope-adapter` command on tiny models, run in a fresh process with a umask, an
output that already exists, a full disk or a signal at the Nth write (testkit/fault_child.py), then checked for the
invariants every run must keep, whatever happened:

- the user's files byte for byte: everything that was in the sandbox before (the model, the adapter, a file or
  folder at the output, the folder a symlink at the output leads to) is unchanged;
- no temporary file or folder is left;
- every JSON file written is strict JSON (no NaN, no Infinity);
- every file and folder made has the mode ``open()`` and ``mkdir()`` give under the umask;
- the exit status is 0, 2 (a refusal or an error) or 130 (interrupted), and a failure ends in one line
  ``rope-adapter: ...`` on stderr, without a traceback.

``tests/cli/test_fault_matrix.py`` runs a seeded sample of :func:`matrix` with every test run;
``benchmarks/fault_matrix.py`` runs all of it and writes a JSON and Markdown report.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testkit.properties import snapshot

CHILD = Path(__file__).with_name("fault_child.py")
COMMANDS = ("info", "card", "push", "analyze", "compare", "eval", "export", "search", "demo")
"""Every subcommand of `rope-adapter --help` (tests/cli/test_fault_matrix.py checks the list is complete)."""
UMASKS = (0o077, 0o027)
EXISTING = ("file", "folder", "symlink")
FAULTS = ("enospc", "sigterm", "sigint")

TEMPORARY = re.compile(r"(\.tmp$|^tmp|\.old-|^\.README\.|^\.adapter_config\.|\.partial$|-journal$|\.incomplete$)")
"""Names of the temporary files and folders rope-adapter, its libraries and ``tempfile`` make."""


@dataclass(frozen=True)
class Cell:
    """One run: a command, the umask, what is at the output already, the fault and the write it hits."""

    command: str
    umask: int = 0o022
    existing: str = "none"  # "none", or EXISTING: a user's file, a non-empty folder, a symlink to a folder elsewhere
    fault: str = "none"  # "none", or FAULTS
    at: int = 0  # the write (1-based, counted under the sandbox) the fault hits

    @property
    def label(self) -> str:
        fault = f"{self.fault}@{self.at}" if self.fault != "none" else "clean"
        return f"{self.command}-umask{self.umask:03o}-{self.existing}-{fault}"


@dataclass
class Outcome:
    """What a run did and which invariants it broke (``violations`` empty: all held)."""

    cell: Cell
    rc: int
    seconds: float
    writes: int | None  # writes counted under the sandbox (None: the process did not get to record them)
    fired: bool | None  # the fault was injected (None: unknown, the process was killed)
    message: str  # the last line on stderr
    violations: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "cell": {**asdict(self.cell), "umask": f"{self.cell.umask:03o}"},
            "label": self.cell.label,
        }


# ------------------------------------------------------------------------------------------------ inputs


def make_inputs(folder: Path) -> Path:
    """A template sandbox: ``model/`` (a tiny 2-layer Llama and the byte tokenizer), ``adapter/`` (an LRS adapter
    for it), ``eval/`` (an `eval` run on it) and ``elsewhere/keep.txt`` (a folder only a symlink leads to). Copied
    for every run."""
    from peft import get_peft_model

    from rope_adapter import LrsConfig
    from testkit.tiny_models import save_model_folder, tiny_model

    folder.mkdir(parents=True, exist_ok=True)
    save_model_folder(tiny_model("llama", num_layers=2), folder / "model")
    adapter = get_peft_model(tiny_model("llama", num_layers=2), LrsConfig(factors=[1.1, 1.3]))
    adapter.save_pretrained(folder / "adapter")
    (folder / "elsewhere").mkdir()
    (folder / "elsewhere" / "keep.txt").write_bytes(b"keep me\n")
    from rope_adapter.evaluate import EvalSettings, run_eval

    settings = EvalSettings.flat(
        model=str(folder / "model"),
        num_pairs=3,
        num_positions=2,
        num_samples=1,
        variants="base,uniform:1.2",
        device="cpu",
        progress=False,
        plot=False,
        out=folder / "eval",
    )
    run_eval(settings, log=lambda s: None)
    return folder


def _out(cell: Cell, root: Path) -> Path:
    return root / ("card.md" if cell.command == "card" else "out")


def argv(cell: Cell, root: Path) -> list[str]:
    """The command line of ``cell`` in the sandbox ``root`` (small settings: each run takes seconds)."""
    model, adapter, out = str(root / "model"), str(root / "adapter"), str(_out(cell, root))
    return {
        "info": ["info", adapter, "--json"],
        "card": ["card", adapter, "--out", out],
        "push": ["push", adapter, "--repo", "someone/lrs", "--dry-run"],
        "compare": ["compare", str(root / "eval"), "--compare", "uniform:1.2", "base", "--json"],
        "analyze": ["analyze", "--model", model, "--what", "decay", "--max-distance", "64", "--out", out],
        "eval": ["eval", "--model", model, "--num-pairs", "3", "--num-positions", "2", "--num-samples", "1"]
        + ["--variants", "base,uniform:1.2", "--device", "cpu", "--no-progress", "--out", out],
        "export": ["export", "--model", model, "--adapter", adapter, "--out", out, "--no-verify"],
        "search": ["search", "--model", model, "--pairs", "3", "--num-positions", "2", "--search-records", "1"]
        + ["--holdout-records", "1", "--trials", "2", "--population", "2", "--s-max", "1.5", "--device", "cpu"]
        + ["--confirm-top", "0", "--no-progress", "--out", out],
        "demo": ["demo", "--model", model, "--pairs", "3", "--positions", "0", "2", "--trials", "2"]
        + ["--search-records", "1", "--eval-records", "1", "--out", out],
    }[cell.command]


def place_existing(cell: Cell, root: Path) -> None:
    """Put what ``cell.existing`` says at the output."""
    out = _out(cell, root)
    if cell.existing == "file":
        out.write_bytes(b"a user's file, not to be touched\n")
    elif cell.existing == "folder":
        out.mkdir()
        (out / "notes.txt").write_bytes(b"a user's notes\n")
    elif cell.existing == "symlink":
        out.symlink_to(root / "elsewhere", target_is_directory=True)


# ------------------------------------------------------------------------------------------------ running


class Runner:
    """The process that runs the cells (testkit/fault_child.py): it imports the command line once and forks a
    process for each cell. Use as a context manager."""

    def __enter__(self) -> Runner:
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("HF_TOKEN", None)  # push --dry-run must not need one
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stdin.close()
        self.process.wait()

    def run(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("the fault runner ended")
        return json.loads(answer)


def run_cell(cell: Cell, template: Path, workdir: Path, runner: Runner) -> Outcome:
    """Run ``cell`` in a fresh copy of ``template`` under ``workdir`` and check the invariants."""
    root = workdir / cell.label
    shutil.copytree(template, root, symlinks=True)
    place_existing(cell, root)
    before = snapshot(root)
    spec = {"root": str(root), "umask": cell.umask, "fault": cell.fault, "at": cell.at}
    logs = {name: str(workdir / f"{cell.label}.{name}") for name in ("stdout", "stderr")}
    start = time.monotonic()
    answer = runner.run({"spec": spec, "argv": argv(cell, root), "cwd": str(root), **logs})
    seconds = time.monotonic() - start
    stderr = Path(logs["stderr"]).read_text(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    outcome = Outcome(
        cell, answer["rc"], round(seconds, 2), answer["writes"], answer["fired"], lines[-1] if lines else ""
    )
    outcome.violations = check(cell, root, before, snapshot(root), answer["rc"], stderr, answer["fired"])
    return outcome


def strict_json_problem(path: Path) -> str | None:
    """Why ``path`` (``.json``, or ``.jsonl`` line by line) is not strict JSON, or None."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    try:
        text = path.read_text(encoding="utf-8")
        docs = [line for line in text.splitlines() if line.strip()] if path.suffix == ".jsonl" else [text]
        for doc in docs:
            json.loads(doc, parse_constant=refuse)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check(cell: Cell, root: Path, before: dict, after: dict, rc: int, stderr: str, fired: bool | None) -> list[str]:
    """The invariants a run in the sandbox ``root`` broke (see the module's notes)."""
    problems = []
    for key, entry in before.items():
        if after.get(key) != entry:
            problems.append(f"a user's file changed or went: {key}")
    for key in after:
        if TEMPORARY.search(Path(key).name):
            problems.append(f"temporary left: {key}")
    made = [key for key in after if key not in before]
    for key in made:
        entry = after[key]
        if key.endswith((".json", ".jsonl")) and entry[0] == "file":
            if (why := strict_json_problem(root / key)) is not None:
                problems.append(f"not strict JSON: {key} ({why})")
        if entry[0] == "file" and entry[1] != 0o666 & ~cell.umask:
            problems.append(f"mode {entry[1]:04o} of {key}, not {0o666 & ~cell.umask:04o} (umask {cell.umask:03o})")
        if entry[0] == "dir" and entry[1] != 0o777 & ~cell.umask:
            problems.append(f"mode {entry[1]:04o} of folder {key}, not {0o777 & ~cell.umask:04o}")
    problems += _status_problems(cell, rc, stderr, fired)
    return problems


def _status_problems(cell: Cell, rc: int, stderr: str, fired: bool | None) -> list[str]:
    problems = []
    lines = [line for line in stderr.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("rope-adapter")]
    if "Traceback (most recent call last)" in stderr:
        problems.append("a traceback on stderr: " + (lines[-1] if lines else ""))
    if rc < 0:
        problems.append(f"killed by signal {-rc}: no clean-up ran")
        return problems
    signal_fault = cell.fault in ("sigterm", "sigint") and fired is not False
    if signal_fault:
        allowed = {130} if fired else {0, 130}
    elif cell.fault == "enospc" and fired:
        allowed = {2}
    elif cell.existing != "none":
        allowed = {0, 2}
    else:
        allowed = {0}
    if rc not in allowed:
        problems.append(f"exit status {rc}, expected {sorted(allowed)}")
    if rc in (2, 130) and (len(ours) != 1 or lines[-1] != ours[0]):
        problems.append(f"not one line: {len(ours)} 'rope-adapter:' lines, last line {lines[-1] if lines else ''!r}")
    if cell.fault == "enospc" and fired and rc == 2 and "No space left on device" not in stderr:
        problems.append("the full disk is not named in the message")
    return problems


# ------------------------------------------------------------------------------------------------ the matrix


def matrix(points: dict[str, int] | None = None) -> list[Cell]:
    """Every cell: per command, a clean run under each umask, each existing output, and each fault at the first,
    middle and last write (``points``: the writes a clean run of each command makes; 1 when unknown)."""
    cells = []
    for command in COMMANDS:
        writes = (points or {}).get(command, 1)
        ats = sorted({1, max(1, writes // 2), writes}) if writes else []
        cells += [Cell(command, umask) for umask in UMASKS]
        cells += [Cell(command, 0o022, existing) for existing in EXISTING]
        for index, (fault, at) in enumerate((f, a) for f in FAULTS for a in ats):
            cells.append(Cell(command, UMASKS[index % 2], "none", fault, at))
    return cells


def sample(seed: int, size: int, commands: tuple[str, ...]) -> list[Cell]:
    """``size`` cells of :func:`matrix` for ``commands``, drawn with ``seed``, at least one with a fault."""
    rng = random.Random(seed)
    cells = [c for c in matrix({c: 3 for c in commands}) if c.command in commands]
    faulty = [c for c in cells if c.fault != "none"]
    first = rng.choice(faulty)
    return [first, *rng.sample([c for c in cells if c != first], size - 1)]
