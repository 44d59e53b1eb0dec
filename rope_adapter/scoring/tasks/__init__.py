"""Fitness tasks for the factor search: a registry of task classes that build scored samples.

``build("kv-retrieval", num_pairs=20)`` makes a task (one error type, :class:`TaskError`); ``task.samples()`` gives
its samples. Each task class says what the rest of the project asks of it: ``position_sweep``, ``display_name``,
``generates_records(options)``, ``supports_generation``.
"""

from . import kv_retrieval, mdqa, passkey, perplexity  # noqa: F401  (registers the tasks)
from .base import (
    Sample,
    Task,
    apply_chat_template,
    check_positions,
    evenly_spaced_positions,
    read_jsonl,
    split_records,
)
from .kv_retrieval import KVRecord, KVRetrievalTask
from .mdqa import Document, MDQATask, QARecord, best_subspan_em, normalize_answer
from .passkey import PasskeyRecord, PasskeyTask
from .perplexity import PerplexityTask, TextWindow
from .registry import (
    TaskError,
    available_tasks,
    build,
    canonical_task_name,
    display_name,
    get_task,
    position_tasks,
    register_task,
    task_options,
)

__all__ = [
    "Document",
    "KVRecord",
    "KVRetrievalTask",
    "MDQATask",
    "PasskeyRecord",
    "PasskeyTask",
    "PerplexityTask",
    "QARecord",
    "Sample",
    "Task",
    "TaskError",
    "TextWindow",
    "apply_chat_template",
    "canonical_task_name",
    "available_tasks",
    "best_subspan_em",
    "build",
    "display_name",
    "check_positions",
    "evenly_spaced_positions",
    "get_task",
    "normalize_answer",
    "position_tasks",
    "read_jsonl",
    "register_task",
    "split_records",
    "task_options",
]
