"""The code's shape, as the design asks: small files, no import circle, and the CLI as the top floor."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable
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
    assert {p.name for p in tests.glob("test_*.py")} == {"test_layout.py", "test_layout_private.py"}
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


# ------------------------------------------------------------------------------------------ one way to write a file

WRITE_ROOTS = ("rope_adapter", "search", "export", "benchmarks")
"""Every folder of code that writes files. The writes themselves are in rope_adapter/files.py."""

WRITE_MODULE = "rope_adapter/files.py"

WRITES_ALLOWED = {  # (file, function) -> why this write does not go through rope_adapter/files.py
    ("rope_adapter/embedded/cache.py", "locked"): "flocks the cache's lock file; nothing is ever written to it",
    ("rope_adapter/embedded/convert.py", "model_dir"): "renames a converted model folder into the cache "
    "(a folder, whose files were written privately and given their modes by files.set_default_modes)",
    ("export/staging.py", "publish"): "swaps a finished export folder into place (a folder, given its modes by "
    "files.set_default_modes; its files were written into a private temporary folder)",
    ("benchmarks/overhead.py", "memory_child"): "writes the kernel's /proc/self/clear_refs control (resets the peak "
    "resident set before a measured prefill); no file is made",
}

PATH_WRITERS = {"save_file", "save", "savefig", "savez", "savez_compressed", "savetxt", "to_csv", "imwrite"}
"""Writers that take a path: allowed only on the temporary path of a ``with files.writing(...) as temp`` block."""

MOVERS = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj", "replace", "rename", "renames"}


def _call_name(node: ast.Call) -> tuple[str, str]:
    """(receiver, name) of a call: ("json", "dumps") for json.dumps(...), ("", "open") for open(...)."""
    func = node.func
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute):
        value = func.value
        receiver = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else "?"
        return receiver, func.attr
    return "?", "?"


def _mode(node: ast.Call, position: int) -> str | None:
    args = [*node.args[position : position + 1], *(k.value for k in node.keywords if k.arg == "mode")]
    return args[0].value if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) else None


def _writing_targets(tree: ast.AST) -> dict[ast.AST, set[str]]:
    """For each node, the names bound by the enclosing ``with ...writing(...) as name`` blocks."""
    bound: dict[ast.AST, set[str]] = {}

    def visit(node: ast.AST, names: frozenset[str]) -> None:
        bound[node] = set(names)
        inner = names
        if isinstance(node, ast.With):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and _call_name(expr)[1] == "writing":
                    if isinstance(item.optional_vars, ast.Name):
                        inner = inner | {item.optional_vars.id}
        for child in ast.iter_child_nodes(node):
            visit(child, inner if isinstance(node, ast.With) and child in node.body else names)

    visit(tree, frozenset())
    return bound


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        owner[node] = name
        for child in ast.iter_child_nodes(node):
            visit(child, child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name)

    visit(tree, "<module>")
    return owner


def _writes(path: Path) -> list[tuple[int, str, str]]:
    """(line, function, what) for every call in ``path`` that writes a file without rope_adapter.files."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound, owner = _writing_targets(tree), _functions(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "json"
            and {"dump", "dumps"} & {a.name for a in node.names}
        ):
            found.append((node.lineno, owner[node], "from json import dump(s)"))
        if not isinstance(node, ast.Call):
            continue
        receiver, name = _call_name(node)
        what = f"{receiver}.{name}" if receiver else name
        names = {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
        if receiver == "files" or names & bound[node]:  # the module, or the temporary path of files.writing()
            continue
        if receiver == "json" and name in ("dump", "dumps"):
            found.append((node.lineno, owner[node], what))
        elif name == "open" and receiver in ("", "io", "builtins", "os", "?") or (name == "open" and receiver):
            mode = _mode(node, 1 if receiver in ("", "io", "builtins") else 0)
            flags = ast.unparse(node)
            flags = "" if "os.devnull" in flags else flags  # a descriptor on /dev/null is not a file we write
            if (mode and set(mode) & set("wax+")) or (receiver == "os" and re.search(r"O_(WRONLY|RDWR|CREAT)", flags)):
                found.append((node.lineno, owner[node], f"{what}(..., {mode or flags})"))
        elif name in ("write_text", "write_bytes") or name in ("NamedTemporaryFile", "mkstemp", "fdopen"):
            found.append((node.lineno, owner[node], what))
        elif name in MOVERS and receiver in ("shutil", "os"):
            found.append((node.lineno, owner[node], what))
        elif name in PATH_WRITERS:
            found.append((node.lineno, owner[node], what))
    return found


def _assert_no_bypass(
    roots: tuple[str, ...],
    module: str,
    scan: Callable[[Path], list[tuple[int, str, str]]],
    allowed: dict[tuple[str, str], str],
    headline: str,
) -> None:
    """Fail, under ``headline``, with ``file:line in function: what`` for every hit of ``scan`` in the Python files
    below ``roots`` (``module`` itself and committed results aside) that ``allowed`` does not list by (file,
    function)."""
    offenders = []
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == module or "results/" in rel:
                continue
            offenders += [
                f"{rel}:{line} in {function}: {what}"
                for line, function, what in scan(path)
                if (rel, function) not in allowed
            ]
    assert not offenders, headline + ":\n" + "\n".join(offenders)


def test_every_file_write_goes_through_the_one_module():
    """A write that opens a file for writing, writes a Path, dumps JSON, saves tensors or a figure, copies or
    renames anything, anywhere but rope_adapter/files.py (temporary file, fsync, the umask's mode, rename), is a
    fault: a partial file on a full disk, a 0600 file, a bare NaN. The allowed exceptions say why."""
    _assert_no_bypass(WRITE_ROOTS, WRITE_MODULE, _writes, WRITES_ALLOWED, "writes that bypass rope_adapter.files")


def test_the_write_scan_finds_each_kind_of_write(tmp_path):
    """The scan itself: each kind of bypassing write is found, and writes through the module are not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json, os, shutil, torch\n"
        "from rope_adapter import files\n"
        "def bad(p, d, fig):\n"
        "    open(p, 'w').write('x')\n"
        "    with p.open('ab') as h: pass\n"
        "    p.write_text('x')\n"
        "    json.dump(d, open(p))\n"
        "    s = json.dumps(d)\n"
        "    torch.save(d, p)\n"
        "    fig.savefig(p)\n"
        "    shutil.copyfile(p, p)\n"
        "    os.replace(p, p)\n"
        "    os.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "def good(p, d, fig):\n"
        "    open(p).read()\n"
        "    files.write_json(p, d)\n"
        "    with files.writing(p) as temp:\n"
        "        torch.save(d, temp)\n"
        "    files.save_figure(fig, p)\n"
    )
    found = _writes(sample)
    assert {f for _, f, _ in found} == {"bad"}, found
    assert len(found) == 10, found


def test_no_json_is_written_without_the_strict_function():
    """json.dump/json.dumps allow NaN and Infinity, which are not JSON: every JSON text we make comes from
    rope_adapter.files.dumps_json (allow_nan=False, naming the file and the field). Tests and the module itself
    aside, no code calls json.dump or json.dumps."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for root in WRITE_ROOTS
        for path in sorted((ROOT / root).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != WRITE_MODULE
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and _call_name(node) in (("json", "dump"), ("json", "dumps"))
    ]
    assert not offenders, offenders


# ------------------------------------------------------------------------------------------ one way to read a record

READ_ROOTS = ("rope_adapter", "search", "export", "benchmarks")
"""The installed package (the CLI included) and the benchmarks' scripts, which read results files (through their
typed readers where the writer has one) and JSON lines (records.loads_json)."""

READ_MODULE = "rope_adapter/records.py"

READS_ALLOWED = {  # (file, function) -> why this JSON parse is not a read of a record through rope_adapter/records.py
    ("rope_adapter/cli/settings_flags.py", "key_value"): "a user's KEY=VALUE flag, not a file: VALUE is parsed as "
    "JSON with NaN and Infinity refused (records.refuse_constant), else kept as text",
    ("search/fingerprint.py", "study_fingerprint"): "the task options round-tripped through the strict writer "
    "(files.dumps_json) into plain JSON values; no file is read",
}
"""export/verify.py's child process (Python source in a string, run with ``python -c``) reads the probe.json its
parent wrote with ``json.load``: it runs without rope_adapter by design, and the scan does not see into strings."""


def _json_reads(path: Path) -> list[tuple[int, str, str]]:
    """(line, function, what) for every JSON parse in ``path``: json.load(s), json.JSONDecoder, from json import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    owner = _functions(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "json":
            if {"load", "loads", "JSONDecoder"} & {a.name for a in node.names}:
                found.append((node.lineno, owner[node], "from json import load(s)"))
        elif isinstance(node, ast.Call) and _call_name(node) in (
            ("json", "load"),
            ("json", "loads"),
            ("json", "JSONDecoder"),
        ):
            found.append((node.lineno, owner[node], ".".join(_call_name(node))))
    return found


def test_every_json_read_goes_through_the_records_module():
    """json.load/json.loads take NaN and Infinity and check nothing: every JSON file the package or a benchmark
    reads goes through rope_adapter/records.py (strict JSON, the typed record, one RecordFileError naming the file
    and the field). The allowed exceptions say why."""
    _assert_no_bypass(
        READ_ROOTS, READ_MODULE, _json_reads, READS_ALLOWED, "JSON reads that bypass rope_adapter.records"
    )


def test_the_read_scan_finds_each_kind_of_read(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json\nfrom json import loads\nfrom rope_adapter.records import read_json\n"
        "def bad(p):\n    json.loads(p.read_text())\n    json.load(open(p))\n    json.JSONDecoder().decode('1')\n"
        "def good(p):\n    read_json(p)\n    '''json.loads(text) in a string'''\n"
    )
    found = _json_reads(sample)
    assert [(f, w) for _, f, w in found] == [
        ("<module>", "from json import load(s)"),
        ("bad", "json.loads"),
        ("bad", "json.load"),
        ("bad", "json.JSONDecoder"),
    ], found
