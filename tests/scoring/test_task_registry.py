"""One way to build a task, and a registry that answers every question about a task: a new task class registered
in one module is a position sweep for eval, named in cards, and built by search and eval without other edits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from rope_adapter.errors import LrsError
from rope_adapter.evaluate.evaluation import make_task_samples
from rope_adapter.scoring.tasks import (
    KVRetrievalTask,
    TaskError,
    build,
    display_name,
    position_tasks,
    register_task,
    registry,
)


@dataclass
class ToyRecallTask(KVRetrievalTask):
    """A task added the documented way: one module, one decorator (the second file is the import that registers it;
    here the fixture, which also takes it out again so that other tests see the usual registry)."""

    display_name: ClassVar[str] = "toy recall"


@pytest.fixture
def toy_task():
    register_task("toy_recall")(ToyRecallTask)
    yield ToyRecallTask
    registry._TASKS.pop("toy_recall")


def test_a_new_task_is_known_everywhere_from_its_class(toy_task):
    assert "toy_recall" in position_tasks() and "perplexity" not in position_tasks()
    assert display_name("toy-recall") == "toy recall" and display_name("kv_retrieval") == "KV retrieval"
    task, samples = make_task_samples("toy_recall", num_samples=2, num_pairs=3, positions=[0, 2])
    assert isinstance(task, ToyRecallTask) and len(samples) == 4  # generated: 2 records x 2 positions


def test_build_has_one_error_type():
    assert isinstance(build("kv-retrieval", num_pairs=5, num_records=1), KVRetrievalTask)
    for call, message in [
        (lambda: build("nope"), "unknown task 'nope'"),
        (lambda: build("kv_retrieval", filler=3), r"has no option\(s\) \['filler'\]"),
        (lambda: build("kv_retrieval", num_pairs=0), "task 'kv_retrieval': "),
    ]:
        with pytest.raises(TaskError, match=message) as info:
            call()
        assert isinstance(info.value, LrsError)
