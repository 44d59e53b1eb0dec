"""Name -> task class registry (no global state beyond this one dictionary, filled at import)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .base import Task

T = TypeVar("T", bound=type[Task])

_TASKS: dict[str, type[Task]] = {}


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
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(available_tasks())}") from None


def available_tasks() -> list[str]:
    """Sorted names of the registered tasks."""
    return sorted(_TASKS)
