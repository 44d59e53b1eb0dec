"""One error root: every exception class the project defines derives from LrsError (interrupts aside), so the
CLI reports all of them with one ``except``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil

from hypothesis import given
from hypothesis import strategies as st

from rope_adapter.errors import LrsError, first_line


def test_every_project_error_derives_from_lrs_error():
    found = {}
    rooms = ["rope_adapter"] + [f"rope_adapter.{r}" for r in ("search", "export", "scoring", "evaluate", "cli")]
    names = set(rooms)
    for room in rooms:  # each room on its own: in an editable install the mapped folders are not under __path__
        package = importlib.import_module(room)
        names |= {i.name for i in pkgutil.walk_packages(package.__path__, f"{room}.")}
    for name in sorted(names):
        if name.endswith("__main__"):
            continue
        if name.startswith("rope_adapter.vllm.") and importlib.util.find_spec("vllm") is None:
            continue  # the vLLM plugin's model classes import vLLM, which has its own venv (make test-vllm)
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("rope_adapter"):
                found[f"{obj.__module__}.{attr}"] = obj
    assert len(found) >= 10, sorted(found)
    interrupts = {k for k, v in found.items() if issubclass(v, KeyboardInterrupt)}
    outside = sorted(k for k, v in found.items() if k not in interrupts and not issubclass(v, LrsError))
    assert not outside, outside


@given(st.text(), st.sampled_from([ValueError, OSError, RuntimeError, KeyError]))
def test_first_line_is_one_non_blank_line_of_the_message_or_the_class_name(text, kind):
    """What every one-line error quotes of a library's error: never blank, never two lines."""
    line = first_line(kind(text))
    assert line.strip() and "\n" not in line
    assert line in str(kind(text)) or line == kind.__name__
