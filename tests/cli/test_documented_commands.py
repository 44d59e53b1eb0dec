"""Every command line the documentation shows is one the command line takes: each ``rope-adapter CMD`` in a code
block or code span of the README, ``docs/``, the benchmarks' READMEs and the ``--help`` examples names a subcommand, each ``--flag`` after it
is one of that subcommand's own (no abbreviation), and a value given to a flag with choices is one of them; a flag
named alone in a code span is a flag of some subcommand, or one of another tool that the text names."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from rope_adapter.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]

OTHER_TOOLS = {
    "--include_path": "lm_eval (docs/harness.md)",
    "--control": "benchmarks/overhead.py (docs/overhead.md)",
    "--trust-remote-code": "vllm serve (docs/serving-vllm.md)",
}
"""Flags in code spans that belong to another command than rope-adapter, and where."""


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks").rglob("*.md"))]


def _code(text: str) -> Iterator[str]:
    """The lines of every fenced code block (a backslash continuation joined) and every inline code span."""
    fence = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
    for block in fence.finditer(text):
        yield from re.sub(r"\\\n\s*", " ", block.group(1)).splitlines()
    yield from re.findall(r"(?<!`)`([^`\n]+)`(?!`)", fence.sub("", text))


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _is_placeholder(token: str) -> bool:
    return not token or token[0] in "-[<$'\"{" or token.isupper() or "..." in token


COMMAND = re.compile(r"(?:^\s*(?:\$\s+)?(?:[\w./-]*/)?|(?:&&|;|\|)\s*)rope-adapter[ \t]+([a-z][\w-]*)([^|;&]*)")
"""``rope-adapter CMD ARGS`` where a command starts: at the start of a line or code span (after a prompt or a
path to the script), or after ``&&``, ``;`` or ``|``; not the name in a sentence or an error message."""


def problems_in(text: str, commands: dict[str, argparse.ArgumentParser], lone_flags: bool = True) -> list[str]:
    """What in ``text``'s code is not a command line rope-adapter takes (one line each); ``lone_flags``: also a
    code span that names a flag alone (README and docs/; the benchmarks' READMEs name their scripts' flags)."""
    flags = {name: {o: a for a in p._actions for o in a.option_strings} for name, p in commands.items()}
    every_flag = {f for options in flags.values() for f in options}
    found = []
    for line in _code(text):
        for m in COMMAND.finditer(line):
            name, rest = m.group(1), re.split(r"\s#", m.group(2))[0]
            if name not in commands:
                found.append(f"`rope-adapter {name}`: no such subcommand")
                continue
            try:
                tokens = shlex.split(rest)
            except ValueError:
                tokens = rest.split()
            for i, token in enumerate(tokens):
                flag = token.split("=", 1)[0]
                if not re.fullmatch(r"--[a-z][\w-]*", flag):
                    continue
                action = flags[name].get(flag)
                if action is None:
                    found.append(f"`rope-adapter {name} {flag}`: {name} has no such flag")
                    continue
                value = token.split("=", 1)[1] if "=" in token else (tokens[i + 1] if i + 1 < len(tokens) else "")
                if action.choices is not None and action.nargs is None and not _is_placeholder(value):
                    if value not in action.choices:
                        found.append(f"`rope-adapter {name} {flag} {value}`: not one of {sorted(action.choices)}")
        for flag in re.findall(r"^(--[a-z][\w-]*)", line) if lone_flags else ():
            if flag not in every_flag and flag not in OTHER_TOOLS:
                found.append(f"`{flag}`: no subcommand has this flag")
    return found


def test_every_documented_command_line_is_one_the_cli_takes():
    commands = _subcommands()
    found = [
        f"{p.relative_to(ROOT)}: {line}"
        for p in _documents()
        for line in problems_in(p.read_text(), commands, lone_flags=p.parts[len(ROOT.parts)] != "benchmarks")
    ]
    assert not found, "the documentation shows command lines the CLI does not take:\n" + "\n".join(found)


def test_every_example_in_the_help_is_one_the_cli_takes():
    """The examples that ``--help`` prints under each subcommand, held to the same rule."""
    commands = _subcommands()
    examples = {name: parser.epilog or "" for name, parser in commands.items()}
    assert sum("rope-adapter " in text for text in examples.values()) >= 8
    found = [
        f"{name} --help: {line}"
        for name, text in examples.items()
        for line in problems_in(f"```\n{text}\n```\n", commands)
    ]
    assert not found, "--help shows command lines the CLI does not take:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_mistake():
    """The scan sees what it guards: a flag another subcommand has, an abbreviation, a value outside the choices,
    a subcommand that does not exist, a lone flag no subcommand has; and passes the same lines written right."""
    commands = _subcommands()
    wrong = """
```bash
rope-adapter export --model m --adapter a --out o --trials 3
rope-adapter search --model m \\
    --sampl gp
rope-adapter search --sampler annealing --out o   # a comment --not-a-flag
rope-adapter serve --model m
python -m x && rope-adapter info m; rope-adapter eval --model m --scorz logprob
```
Use `--num-position` to score more, or `rope-adapter eval --variants base --dtype float32`; rope-adapter cannot
serve it (an error message), and `model = load()   # rope-adapter not needed` is a comment.
"""
    assert sorted(problems_in(wrong, commands)) == sorted(
        [
            "`rope-adapter export --trials`: export has no such flag",
            "`rope-adapter search --sampl`: search has no such flag",
            "`rope-adapter search --sampler annealing`: not one of ['gp', 'nsga2', 'tpe']",
            "`rope-adapter serve`: no such subcommand",
            "`rope-adapter eval --scorz`: eval has no such flag",
            "`--num-position`: no subcommand has this flag",
        ]
    )
    right = wrong.replace("--trials 3", "--overwrite").replace("--sampl ", "--sampler ")
    right = right.replace("annealing", "tpe").replace("serve --model m", "info m").replace("-position`", "-positions`")
    right = right.replace("--scorz", "--scores")
    assert problems_in(right, commands) == []


def test_the_other_tools_flags_are_still_named_where_they_are_allowed():
    texts = "\n".join(p.read_text() for p in _documents())
    assert all(f"`{flag}" in texts for flag in OTHER_TOOLS), "an allowed flag the documentation no longer shows"


def _python_blocks() -> Iterator[tuple[Path, str]]:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.finditer(r"^```python\n(.*?)^```", path.read_text(), re.M | re.S):
            yield path, block.group(1)


def _resolve(dotted: str) -> object:
    """The object a dotted name of ours names (a module, then attributes); AttributeError when there is none."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise AttributeError(dotted)


def python_problems(code: str) -> list[str]:
    """What in a documented Python block does not match the code: a syntax error, a name imported from or reached
    through ``rope_adapter`` that does not exist, a keyword argument that a function of ours does not take."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"not Python: {exc}"]
    ours: dict[str, object] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rope_adapter":
            for alias in node.names:
                try:
                    ours[alias.asname or alias.name] = _resolve(f"{node.module}.{alias.name}")
                except AttributeError:
                    found.append(f"from {node.module} import {alias.name}: no such name")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node).startswith("rope_adapter."):
            dotted = ast.unparse(node)
            try:
                ours.setdefault(dotted, _resolve(dotted))
            except AttributeError:
                found.append(f"{dotted}: no such name")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ours and callable(ours[ast.unparse(node.func)]):
            try:
                params = inspect.signature(ours[ast.unparse(node.func)]).parameters  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
                continue
            found += [
                f"{ast.unparse(node.func)}({k.arg}=...): no such argument"
                for k in node.keywords
                if k.arg is not None and k.arg not in params
            ]
    return found


def test_every_documented_python_block_matches_the_api():
    blocks = list(_python_blocks())
    assert len(blocks) >= 10
    found = [f"{path.relative_to(ROOT)}: {line}" for path, code in blocks for line in python_problems(code)]
    assert not found, "the documentation shows Python the API does not take:\n" + "\n".join(found)


def test_the_python_scan_finds_each_kind_of_mistake():
    wrong = (
        "import rope_adapter\n"
        "from rope_adapter import LrsConfig, LrsConfg\n"
        "cfg = LrsConfig(factor=[1.0])\n"
        "rope_adapter.set_factor(model, 1.1)\n"
        "if True print(1)\n"
    )
    assert python_problems(wrong)[0].startswith("not Python")
    wrong = wrong.replace("if True print(1)\n", "")
    assert sorted(python_problems(wrong)) == [
        "LrsConfig(factor=...): no such argument",
        "from rope_adapter import LrsConfg: no such name",
        "rope_adapter.set_factor: no such name",
    ]
    right = wrong.replace(", LrsConfg", "").replace("factor=", "factors=").replace("set_factor(", "set_factors(")
    assert python_problems(right) == []
