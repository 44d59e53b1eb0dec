"""`rope-adapter push FOLDER --repo org/name`: publish an adapter or exported model with its model card."""

from __future__ import annotations

import argparse

from rope_adapter.cli import add_folder_argument
from rope_adapter.export.card import read_folder
from rope_adapter.export.hub import push_folder

HELP = "publish an adapter or exported model folder to the Hugging Face Hub with a model card"
DESCRIPTION = (
    "Upload an LRS adapter folder (save_pretrained / `rope-adapter search` output) or a folder "
    "written by `rope-adapter export` to a Hub repo, in one commit, with a README.md model card generated "
    "from the folder's files (`rope-adapter card FOLDER` shows it first). The token comes from huggingface_hub's usual sources (HF_TOKEN, "
    "`hf auth login`); it is never printed. HF_ENDPOINT selects another Hub endpoint."
)


EPILOG = """\
examples:
  rope-adapter push runs/smollm2/adapter --repo org/smollm2-lrs --dry-run   # list what would go up, upload nothing
  rope-adapter push smollm2-lrs --repo org/smollm2-lrs --private --message "LRS factors, 50-pair search"
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_folder_argument(p)
    p.add_argument("--repo", required=True, metavar="ORG/NAME", help="target repo id (created if missing)")
    p.add_argument("--private", action="store_true", help="create the repo as private (existing repos keep theirs)")
    p.add_argument("--revision", metavar="BRANCH", help="push to this branch (created from main if missing)")
    p.add_argument("--message", metavar="TEXT", help="commit message (default: says what is uploaded)")
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be uploaded and what is left out; upload nothing"
    )


def run(args: argparse.Namespace) -> int:
    info = read_folder(args.folder)
    print(
        f"{'would upload' if args.dry_run else 'uploading'} to {args.repo}: README.md (generated), "
        + ", ".join(f for f in info.files if f != "README.md")
    )
    if info.left_out:
        print("left out: " + "; ".join(info.left_out))
    if args.dry_run:
        return 0
    url = push_folder(args.folder, args.repo, private=args.private, revision=args.revision, commit_message=args.message)
    print(f"pushed {args.folder} to {args.repo}: {url}")  # push_folder joins a relative commit URL to the endpoint
    return 0
