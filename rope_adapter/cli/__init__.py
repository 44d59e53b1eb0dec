"""The `rope-adapter` command line: the one place that joins core, search and export. Nothing imports it.

Each subcommand lives in its own module here with ``HELP``, ``DESCRIPTION``, ``add_arguments(parser)`` and
``run(args) -> int`` (:func:`add_subcommand` makes its parser).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rope_adapter.errors import MISSING_IMPORT_HINT, LrsError
from rope_adapter.numbers import cli_int
from rope_adapter.writable import blank_path_reason

SUBCOMMANDS = ["info", "demo", "search", "export", "card", "push", "eval", "analyze", "compare"]


class CliError(LrsError):
    """An error the CLI reports as one line, without a traceback."""


class CliInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, with the line the CLI prints for it (exit status 130)."""


def output_path(text: str) -> Path:
    """argparse type of every ``--out``: a path that is not empty or blank (``Path("")`` would be the current
    folder, and an export with ``--overwrite`` would replace it)."""
    why = blank_path_reason(text, "the path")
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return Path(text)


class IntListAction(argparse.Action):
    """Integers given either way: ``--positions 0 4 9`` or ``--positions 0,4,9`` (eval and search agree)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[str] | None,
        option_string: str | None = None,
    ) -> None:
        items = [values] if isinstance(values, str) else list(values)
        out: list[int] = []
        for item in items:
            for part in str(item).split(","):
                if not part.strip():
                    continue
                try:
                    out.append(cli_int(part))
                except argparse.ArgumentTypeError:
                    parser.error(f"{option_string}: expected integers (0 4 9 or 0,4,9), got {part!r}")
        if not out:
            parser.error(f"{option_string}: give at least one integer")
        setattr(namespace, self.dest, out)


def add_folder_argument(p: argparse.ArgumentParser) -> None:
    """The FOLDER that `card` and `push` take: an adapter folder or a folder `export` wrote."""
    p.add_argument("folder", metavar="ADAPTER_OR_EXPORT_DIR", help="adapter folder or exported model folder")


def add_subcommand(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``, from its module ``rope_adapter.cli.NAME``: ``HELP`` (one line),
    ``DESCRIPTION``, ``EPILOG`` (optional, printed as written), ``add_arguments(parser)`` and ``run(args)``."""
    module = importlib.import_module(f"rope_adapter.cli.{name}")
    epilog = getattr(module, "EPILOG", None)
    p = sub.add_parser(
        name,
        help=module.HELP,
        description=module.DESCRIPTION,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter,
    )
    module.add_arguments(p)
    p.set_defaults(run=module.run)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rope-adapter",
        description="Layer-specific RoPE scaling (arXiv 2503.04355): inspect, search, export and publish adapters.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        add_subcommand(sub, name)
    return parser


def parse_command(name: str, argv: list[str]) -> argparse.Namespace:
    """``rope-adapter NAME ARGV...`` parsed by that subcommand's parser alone (for scripts that take a command line)."""
    parser = argparse.ArgumentParser(prog="rope-adapter")
    add_subcommand(parser.add_subparsers(), name)
    return parser.parse_args([name, *argv])


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM (``timeout``, job schedulers, a container stopping) is handled like Ctrl-C:
    ``KeyboardInterrupt`` in the main thread, so every clean-up runs (temporary files are removed) and the command
    ends with one line and status 130. Commands with a handler of their own (search, export) install it inside and
    put this one back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise CliInterrupted("terminated (SIGTERM); files written so far are whole, nothing is half-written")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def os_error_line(exc: OSError) -> str:
    """One line for an error of the file system (a full disk, no permission, a read-only mount): what, where, and
    what to do; the atomic writes (rope_adapter.files) left every previous file as it was."""
    what = exc.strerror or str(exc) or type(exc).__name__
    where = f": {os.fsdecode(exc.filename)}" if exc.filename is not None else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free some space or choose another --out, and run the command again"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "choose a folder you can write, or fix its permissions"
    else:
        fix = "check the path and the disk, and run the command again"
    return f"{what}{where}; {fix} (files written before are whole: none is half-written)"


def _say(text: str) -> None:
    """Print a message as exactly one line on stderr (a path with a newline in it stays on that line)."""
    print(text.replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with sigterm_as_interrupt():
            return int(args.run(args) or 0)
    except KeyError as exc:
        if "LRS" in str(exc):
            _say(f"rope-adapter: error: {MISSING_IMPORT_HINT}")
            return 2
        raise
    except (LrsError, FileNotFoundError) as exc:  # every project error derives from LrsError
        _say(f"rope-adapter: error: {exc}")
        return 2
    except KeyboardInterrupt as exc:
        detail = str(exc) if isinstance(exc, CliInterrupted) else "interrupted"
        _say(f"rope-adapter: {detail}")
        return 130
    except BrokenPipeError:  # `rope-adapter info X | head -1`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # the file system refused a write (a full disk, permissions): one line, not a traceback
        _say(f"rope-adapter: error: {os_error_line(exc)}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
