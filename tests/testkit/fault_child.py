"""Run `rope-adapter` commands with a fault injected, for the fault-injection harness (testkit/faults.py).

    python tests/testkit/fault_child.py

reads one JSON request a line on stdin: ``{"spec": {...}, "argv": [...], "cwd": ..., "stdout": file, "stderr":
file}``, and answers each with one JSON line ``{"rc": status, "writes": N, "fired": bool}``. It imports the command
line once, then runs every request in a forked process of its own (a real process: its own umask, signals and exit
status, seconds instead of a minute of imports on a loaded machine).

``spec``: ``{"root": sandbox, "umask": 0o027, "fault": "none" | "enospc" | "sigterm" | "sigint", "at": N}``. The
process sets the umask, then counts the writes it makes under ``root`` (an audit hook: files opened for writing,
``mkdir``, renames, SQLite databases opened) and at the Nth one injects the fault: ``enospc`` makes that call and
every later one fail with ``OSError(ENOSPC)`` (a disk that is full from then on; CI cannot rely on mounting a small
file system; a single failed open would be hidden by fallbacks such as ``tempfile``'s), ``sigterm``/``sigint`` send
the signal to the process (handled, like a real one, at the next bytecode). ``rc`` is negative when a signal ended
the process, and then ``writes`` and ``fired`` are None.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import tempfile

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _written_path(event: str, args: tuple) -> str | None:
    """The path a write event touches, or None for events that do not write."""
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        path = path if writes else None
    elif event in ("os.mkdir", "sqlite3.connect"):
        path = args[0]
    elif event in ("os.rename", "shutil.copyfile"):
        path = args[1]
    else:
        return None
    return os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else None


def install(root: str, fault: str, at: int, state: dict) -> None:
    """The audit hook that counts writes under ``root`` and injects ``fault`` at write ``at``."""
    root = os.path.realpath(root)

    def hook(event: str, args: tuple) -> None:
        path = _written_path(event, args)
        if path is None or (state["fired"] and fault != "enospc"):
            return
        full = os.path.realpath(os.path.join(os.getcwd(), path))
        if not (full == root or full.startswith(root + os.sep)):
            return
        state["writes"] += 1
        if fault == "none" or state["writes"] < at:
            return
        state["fired"] = True
        if fault == "enospc":  # the disk stays full: this write and every later one fail
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        os.kill(os.getpid(), signal.SIGTERM if fault == "sigterm" else signal.SIGINT)

    sys.addaudithook(hook)


def run_one(request: dict, cli_main) -> None:
    """In the forked process: set up, run the command, record the counts, leave with its status."""
    spec = request["spec"]
    state = {"writes": 0, "fired": False}
    os.chdir(request["cwd"])
    os.umask(int(spec.get("umask", 0o022)))
    for fd, name in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    install(spec["root"], spec.get("fault", "none"), int(spec.get("at", 0)), state)
    try:
        rc = cli_main(request["argv"])
    except SystemExit as exc:  # argparse
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a crash: the traceback goes to stderr, as Python prints it
        import traceback

        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    with open(request["counts"], "w") as handle:  # outside the sandbox: not counted
        handle.write(json.dumps({"writes": state["writes"], "fired": state["fired"]}))
    os._exit(int(rc or 0))


def serve() -> None:
    import warnings

    warnings.filterwarnings("ignore")
    from rope_adapter.cli import build_parser
    from rope_adapter.cli import main as cli_main

    build_parser()  # every subcommand's module imported once, here
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        request["counts"] = tempfile.mktemp(prefix="fault-counts-")
        pid = os.fork()
        if pid == 0:
            run_one(request, cli_main)
        _, status = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        counts = {"writes": None, "fired": None}
        if os.path.exists(request["counts"]):
            with open(request["counts"]) as handle:
                counts = json.loads(handle.read())
            os.unlink(request["counts"])
        print(json.dumps({"rc": rc, **counts}), flush=True)


if __name__ == "__main__":
    serve()
