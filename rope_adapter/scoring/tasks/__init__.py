"""Fitness tasks for the factor search: a registry of task classes that build scored samples.

``get_task("kv_retrieval")(num_pairs=20)`` makes a task; ``task.samples()`` gives its samples.
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
from .registry import available_tasks, canonical_task_name, get_task, register_task

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
    "TextWindow",
    "apply_chat_template",
    "canonical_task_name",
    "available_tasks",
    "best_subspan_em",
    "check_positions",
    "evenly_spaced_positions",
    "get_task",
    "normalize_answer",
    "read_jsonl",
    "register_task",
    "split_records",
]
