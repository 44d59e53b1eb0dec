"""The code's shape, as the design asks: small files, no import circle, and the CLI as the top floor."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
ROOMS = {  # folder (relative to the repo root) -> the package it is installed as
    "rope_adapter": "rope_adapter",
    "rope_adapter/scoring": "rope_adapter.scoring",
    "search": "rope_adapter.search",
    "rope_adapter/evaluate": "rope_adapter.evaluate",
    "export": "rope_adapter.export",
    "rope_adapter/cli": "rope_adapter.cli",
}
MAPPED = {"search": "rope_adapter.search", "export": "rope_adapter.export", "model_cards": "rope_adapter.model_cards"}
"""The only folders not at their import path: the design card puts them at the top (pyproject's package-dir)."""


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in ROOMS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if max((f for f in ROOMS if rel.startswith(f + "/")), key=len) != folder:
                continue  # a room inside this folder: listed under its own folder
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts]) if parts else package] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module ``name`` imports, function-level imports included (TYPE_CHECKING ones too)."""
    base = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            deps.update(subs or ([target] if target in modules else []))
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name in modules)
    deps.discard(name)
    return deps


def test_no_file_over_500_lines():
    """The rooms, and the tests and benchmarks beside them (the design's rule is for every file we write)."""
    files = [
        *_modules().values(),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "benchmarks").rglob("*.py")),
    ]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"files over 500 lines: {long}"


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_nothing_below_the_cli_imports_it():
    modules = _modules()
    offenders = {
        name: sorted(d for d in _imports(name, path, modules) if d.startswith("rope_adapter.cli"))
        for name, path in modules.items()
        if not name.startswith("rope_adapter.cli")
    }
    assert not {k: v for k, v in offenders.items() if v}


FLOORS = {  # a room may import its own modules and the rooms listed here (the CLI, on top, may import any)
    "rope_adapter": set(),
    "rope_adapter.scoring": {"rope_adapter"},
    "rope_adapter.search": {"rope_adapter", "rope_adapter.scoring"},
    "rope_adapter.evaluate": {"rope_adapter", "rope_adapter.scoring"},
    "rope_adapter.export": {"rope_adapter", "rope_adapter.scoring"},
}


def _room(name: str) -> str:
    return max((p for p in ROOMS.values() if name == p or name.startswith(p + ".")), key=len)


def test_rooms_import_only_the_floors_below():
    modules = _modules()
    wrong = sorted(
        f"{name} -> {dep}"
        for name, path in modules.items()
        if _room(name) in FLOORS
        for dep in _imports(name, path, modules)
        if _room(dep) != _room(name) and _room(dep) not in FLOORS[_room(name)]
    )
    assert not wrong, f"imports across rooms that the layout does not allow: {wrong}"


def test_the_core_knows_nothing_of_optuna_or_the_hub():
    third = {"optuna", "huggingface_hub", "matplotlib", "jinja2"}
    found = sorted(
        f"{name} -> {node_name}"
        for name, path in _modules().items()
        if _room(name) == "rope_adapter"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for node_name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if node_name.split(".")[0] in third
    )
    assert not found, f"the core imports {found}"


def test_a_folder_is_its_import_path():
    """Every package folder at the top is rope_adapter itself or a folder the design card maps (search, export,
    model_cards); pyproject maps exactly those."""

    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert tops <= {"rope_adapter", *MAPPED}, tops
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {v: k for k, v in mapped.items() if k != "rope_adapter"} == MAPPED


def test_no_top_level_folder_shadows_another_distribution(tmp_path):
    """Python started in the repo root (as lm-evaluation-harness is) imports the root's packages before installed
    ones: no top-level package or module of the repo may have the name of a module the environment installs
    (Hugging Face's ``evaluate``, say). The names are looked up from another folder, where ours are invisible
    except the installed ``rope_adapter``."""
    tops = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    tops += sorted(p.stem for p in ROOT.glob("*.py"))
    names = sorted({*tops, "evaluate", "json"})  # json: the lookup must see the standard library
    code = (
        "import importlib.util, json, sys; "
        "print(json.dumps({n: getattr(importlib.util.find_spec(n), 'origin', None) for n in sys.argv[1:]}))"
    )
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=tmp_path, capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert found["json"] and found["rope_adapter"] == str(ROOT / "rope_adapter" / "__init__.py")
    ours = {n: {str(ROOT / n / "__init__.py"), str(ROOT / f"{n}.py")} for n in tops}
    clashes = {n: found[n] for n in tops if found[n] and found[n] not in ours[n]}
    assert not clashes, f"top-level folders with the name of an installed module: {clashes}"
    if found["evaluate"]:  # Hugging Face's, installed with lm_eval: Python in the root still finds it, not a room
        code = "import importlib.util; print(importlib.util.find_spec('evaluate').origin)"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == found["evaluate"]


def test_committed_results_hold_no_absolute_local_path():
    """benchmarks/results is published with the repo: no machine path in its text files (benchmarks/scrub_paths.py
    rewrites them) nor anywhere in the bytes of its SQLite study files (free pages included)."""
    absolute = re.compile(r"(?<![\w.~<>-])/(?:work|root|home|tmp|Users|mnt|opt)/")
    suffixes = {".json", ".md", ".log", ".sh", ".txt"}
    found = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "benchmarks" / "results").rglob("*")
        if p.is_file() and p.suffix in suffixes and absolute.search(p.read_text(encoding="utf-8", errors="replace"))
    )
    assert not found, found
    studies = sorted((ROOT / "benchmarks" / "results").rglob("*.db"))
    assert studies  # the committed studies are scanned, not skipped
    in_studies = [str(p.relative_to(ROOT)) for p in studies if re.search(absolute.pattern.encode(), p.read_bytes())]
    assert not in_studies, in_studies


def test_scrub_paths_rewrites_local_paths_and_keeps_scripts_working():
    """The scrub once turned ``#!/usr/bin/env bash`` and ``cd "$(dirname "$0")/../../.."`` in committed command.sh
    files into ``<local>/...``: only local paths are rewritten."""

    spec = importlib.util.spec_from_file_location("scrub_paths", ROOT / "benchmarks" / "scrub_paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    script = '#!/usr/bin/env bash\ncd "$(dirname "$0")/../../.."\nexec x --flag 1\n'
    assert module.scrub(script, ["/work/main"]) == script
    line = "--out /work/main/b/r --storage sqlite:////work/main/b/r/s.db --data /tmp/d/k.jsonl --m /root/c/m"
    assert module.scrub(line, ["/work/main"]) == (
        "--out b/r --storage sqlite:///b/r/s.db --data <local>/k.jsonl --m <local>/m"
    )


def test_committed_scripts_start_with_a_shebang_and_parse():

    for script in (ROOT / "benchmarks").rglob("*.sh"):
        assert script.read_text().startswith("#!/usr/bin/env bash\n"), script
        subprocess.run(["bash", "-n", str(script)], check=True)


def test_tests_are_grouped_by_room():
    """Issue 19: tests/<room>/test_*.py, what they share in tests/testkit/, nothing else at the top but the layout tests."""
    rooms = {"core", "scoring", "search", "evaluate", "export", "cli", "integration", "serving_vllm"}
    tests = ROOT / "tests"
    assert {p.name for p in tests.glob("test_*.py")} == {
        "test_layout.py",
        "test_layout_io.py",
        "test_layout_private.py",
    }
    assert {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))} == {*rooms, "testkit"}
    for room in rooms:
        assert list((tests / room).glob("test_*.py")), room
    assert not list((tests / "testkit").glob("test_*.py"))


def test_no_test_has_a_wall_clock_limit():
    """A loaded machine must not fail a test: no subprocess or wait is bounded by seconds (a socket connect
    attempt inside a loop that waits for the event itself is not a limit, nor is a server thread's shutdown)."""
    limit = re.compile(r"\btimeout\s*=\s*(?!None\b)[\w.]+|pytest\.mark\.timeout")
    allowed = ("create_connection(", "_thread.join(")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "tests").rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if limit.search(line) and not any(a in line for a in allowed) and "limit = re.compile" not in line
    ]
    assert not found, found


def _named_tests(text: str, aliases: dict[str, str]) -> set[tuple[str, str]]:
    """(test file, test name) of every ``tests/FILE.py::test_name`` and ``alias::test_name`` in ``text``."""
    named = {(path, name) for path, name in re.findall(r"tests/([\w/]+\.py)::(test_\w+)", text)}
    named |= {(aliases[a], name) for a, name in re.findall(r"\b(\w+)::(test_\w+)", text) if a in aliases}
    return named


def test_every_test_the_documentation_names_exists():
    """The docs and the results READMEs cite tests as their evidence (``tests/FILE.py::test_name``, or in the
    reliability table an alias from its key, ``layout::test_name``): each one must name a test that is there, so a
    test moved or renamed takes its citations with it."""
    reliability = (ROOT / "docs" / "reliability.md").read_text()
    key = reliability[: reliability.index("## The classes")].replace("\n", " ")
    aliases = dict(re.findall(r"`(\w+)` = `([\w/]+\.py)`", key))
    assert len(aliases) > 30 and aliases["layout"] == "test_layout.py"
    texts = {path: path.read_text() for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]}
    texts |= {path: path.read_text() for path in (ROOT / "benchmarks" / "results").glob("*/README.md")}
    missing, cited = [], 0
    for path, text in texts.items():
        for file, name in sorted(_named_tests(text, aliases if path.name == "reliability.md" else {})):
            cited += 1
            test_file = ROOT / "tests" / file
            if not test_file.is_file() or not re.search(rf"^def {name}\(", test_file.read_text(), re.M):
                missing.append(f"{path.relative_to(ROOT)}: {file}::{name}")
    assert cited > 100
    assert not missing, "the documentation cites tests that do not exist:\n" + "\n".join(missing)


def test_the_citation_scan_finds_both_forms():
    text = "see tests/core/test_x.py::test_a and `kept::test_b`, not kept::*"
    assert _named_tests(text, {"kept": "search/test_kept_scores.py"}) == {
        ("core/test_x.py", "test_a"),
        ("search/test_kept_scores.py", "test_b"),
    }
