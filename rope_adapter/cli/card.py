"""`rope-adapter card FOLDER [--out README.md]`: the model card `rope-adapter push` would upload, to read first."""

from __future__ import annotations

import argparse
import sys

from rope_adapter.cli import CliError, output_path
from rope_adapter.export.card import build_card
from rope_adapter.writable import write_text_atomic


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "card",
        help="write the model card that `push` would upload for an adapter or exported model folder",
        description="Render the README.md model card of an LRS adapter folder or a folder written by "
        "`rope-adapter export`, exactly as `rope-adapter push` builds it (factors, results tables and model-index "
        "from results_table.json / results.json in the folder, no local paths), without any network access. "
        "The folder itself is not changed unless --out points into it.",
    )
    p.add_argument("folder", metavar="ADAPTER_OR_EXPORT_DIR", help="adapter folder or exported model folder")
    p.add_argument("--out", type=output_path, metavar="FILE", help="write the card here (default: print it)")
    p.add_argument(
        "--repo",
        metavar="ORG/NAME",
        help="the repo id it will be published to (used in the loading code; default: the folder's name)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    card = build_card(args.folder, repo_id=args.repo)
    text = str(card)
    if args.out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out, text)
    except OSError as exc:
        raise CliError(f"cannot write the card to {args.out}: {exc}") from None
    print(f"wrote {args.out} (the card `rope-adapter push {args.folder}` would upload)")
    return 0
