"""Name -> task class registry (no global state beyond this one dictionary, filled at import)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from .base import Task, TaskError

T = TypeVar("T", bound=type[Task])

_TASKS: dict[str, type[Task]] = {}

__all__ = [
    "TaskError",
    "available_tasks",
    "build",
    "canonical_task_name",
    "display_name",
    "get_task",
    "position_tasks",
    "register_task",
    "task_options",
]


def register_task(name: str) -> Callable[[T], T]:
    """Class decorator: register a :class:`Task` subclass under ``name`` (also sets ``cls.name``)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"task name must be a non-empty string, got {name!r}")

    def decorator(cls: T) -> T:
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"{cls!r} is not a Task subclass")
        known = _TASKS.get(name)
        if known is not None and known is not cls:
            raise ValueError(f"task name {name!r} is already registered by {known.__module__}.{known.__qualname__}")
        cls.name = name
        _TASKS[name] = cls
        return cls

    return decorator


def canonical_task_name(name: str) -> str:
    """The registry key of a task name: ``kv-retrieval`` and ``kv_retrieval`` are the same task."""
    return name.strip().replace("-", "_")


def get_task(name: str) -> type[Task]:
    """The task class registered under ``name`` (``kv-retrieval`` and ``kv_retrieval`` both work); ``ValueError``
    listing the known names otherwise."""
    try:
        return _TASKS[canonical_task_name(name)]
    except KeyError:
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(available_tasks())}") from None


def available_tasks() -> list[str]:
    """Sorted names of the registered tasks."""
    return sorted(_TASKS)


def position_tasks() -> list[str]:
    """Sorted names of the tasks that sweep the gold position (``Task.position_sweep``)."""
    return sorted(name for name, cls in _TASKS.items() if cls.position_sweep)


def display_name(name: str) -> str:
    """How cards and reports name a task (``Task.display_name``; the name itself for an unknown one)."""
    cls = _TASKS.get(canonical_task_name(name))
    return (cls.display_name or cls.name) if cls is not None else name


def task_options(name: str) -> list[str]:
    """The settings (dataclass fields) a registered task accepts."""
    cls = get_task(name)
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


def build(name: str, **options: Any) -> Task:
    """The one way to make a task: ``build("kv-retrieval", num_pairs=20)``. Options the task does not take and bad
    values are a :class:`TaskError` naming them (a missing data file stays a ``FileNotFoundError``)."""
    cls = get_task(name)
    known = task_options(name)
    unknown = sorted(k for k in options if k not in known)
    if unknown:
        raise TaskError(f"task {cls.name!r} has no option(s) {unknown}; it takes {', '.join(known)}")
    try:
        return cls(**options)
    except FileNotFoundError:
        raise
    except (TypeError, ValueError) as exc:
        raise TaskError(f"task {cls.name!r}: {exc}") from exc
