"""Command lines of benchmark scripts that take a search's own flags after ``--``."""

from __future__ import annotations

import argparse
from typing import Any

from rope_adapter.cli.search import settings_from_argv


def parse_with_search_flags(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, Any]:
    """``(own arguments, SearchSettings)`` of ``OWN_FLAGS -- SEARCH_FLAGS``."""
    split = argv.index("--") if "--" in argv else len(argv)
    return parser.parse_args(argv[:split]), settings_from_argv(argv[split + 1 :])
