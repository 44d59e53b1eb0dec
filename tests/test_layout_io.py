"""One way to write a file and one way to read a record: every write in the code goes through rope_adapter/files.py
(atomic, strict JSON) and every JSON record is read through rope_adapter/records.py, found by scanning the source, and
each scan is shown to find every kind of write or read it looks for."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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
