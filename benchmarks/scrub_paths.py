"""Rewrite the committed result files so that no absolute local path remains (issue 18): paths inside the repo
become repo-relative (``/work/main/benchmarks/...`` -> ``benchmarks/...``), every other one goes through the
model card's rule (``rope_adapter.export.card_data.public_text``: an SQLite URL keeps its file name, an embedded
model's cache folder becomes its Hub id, anything else ``<local>/name``). Text files only (JSON, Markdown, logs,
shell); SQLite study files are left as they are.

    .venv/bin/python benchmarks/scrub_paths.py benchmarks/results [--root /work/main --root /work/qwen-run]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rope_adapter import files
from rope_adapter.export.card_data import public_text

TEXT_SUFFIXES = {".json", ".md", ".log", ".sh", ".txt"}
ABSOLUTE = re.compile(r"(?<![\w.~<>-])(?:/(?:work|root|home|tmp|Users|mnt|opt)/)")
"""Where an absolute local path starts (the check the tests repeat over the committed files)."""


LOCAL_PATH = re.compile(r"(?:sqlite:/+)?" + ABSOLUTE.pattern + r"[^\s\"',;:=]*")
"""A whole local path (or SQLite URL of one) from where it starts: only these are rewritten, so ``#!/usr/bin/env``
and a script's ``$(dirname "$0")/../..`` stay as they are."""


def scrub(text: str, roots: list[str]) -> str:
    for root in sorted(roots, key=len, reverse=True):
        text = re.sub(rf"(sqlite:/+)?{re.escape(root.rstrip('/'))}/", lambda m: m.group(1) or "", text)
    return LOCAL_PATH.sub(lambda m: public_text(m.group(0)), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--root", action="append", default=None, help="a checkout's absolute path (repeatable)")
    args = parser.parse_args()
    roots = args.root or [str(Path(__file__).resolve().parents[1])]
    changed = 0
    for folder in args.folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.suffix in TEXT_SUFFIXES:
                with open(path, encoding="utf-8", newline="") as handle:  # keep \r (progress bars in logs)
                    text = handle.read()
                new = scrub(text, roots)
                if new != text:
                    files.write_text(path, new)  # the text as it is: no newline translation
                    changed += 1
    print(f"rewrote {changed} files")


if __name__ == "__main__":
    main()
