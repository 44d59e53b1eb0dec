"""Common types of the fitness tasks: samples, the task interface, record splits, positions, data reading.

A task turns records (a set of key-value pairs, a question with documents, a passkey, a text window) into
:class:`Sample` objects. A sample is a prompt cut in two, ``prefix + query``, plus the gold continuation
``target`` that scoring teacher-forces and the gold ``answers`` that greedy scoring checks. Samples of the same
record with the same ``prefix`` are scored against ONE forward pass of that prefix (see
``rope_adapter.scoring.shared_prefix``), so tasks put everything that does not depend on the gold position into the
prefix.
"""

from __future__ import annotations

import dataclasses
import gzip
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rope_adapter.errors import LrsError
from rope_adapter.numbers import as_int, as_ints
from rope_adapter.records import loads_json

R = TypeVar("R")


class TaskError(LrsError):
    """An unknown task, an option the task does not take, or a bad option value; the message says which."""


def task_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """A task's whole-number setting (any number type, :mod:`rope_adapter.numbers`) as a Python int, or a
    :class:`TaskError` naming it: ``2.7`` is refused, never truncated; a bool or a string is not a number."""
    return as_int(value, name, error=TaskError, low=low, high=high)


def optional_task_int(value: Any, name: str, *, low: int | None = None) -> int | None:
    """:func:`task_int` where None means "the default" (all records, no stride)."""
    return None if value is None else task_int(value, name, low=low)


def task_positions(positions: Any) -> list[int] | None:
    """Gold positions (a list, tuple, range, 1-D array or tensor of whole numbers) as a list of ints, or None."""
    return None if positions is None else as_ints(positions, "positions", error=TaskError)


@dataclass(frozen=True)
class Sample:
    """One scored prompt.

    The full prompt is ``prefix + query``; teacher-forced scoring appends ``target``.
    """

    prefix: str = field(metadata={"help": "Context shared by all samples of a record at this gold position set."})
    query: str = field(metadata={"help": "Text after the context, up to where the model answers."})
    answers: list[str] = field(metadata={"help": "Gold answer strings for the benchmark's greedy rule."})
    position: int = field(metadata={"help": "Gold position (pair index, document index, filler slot, window)."})
    record_id: str = field(metadata={"help": "Identifies the record; samples of one record can share a prefix."})
    target: str = field(default="", metadata={"help": "Continuation that is teacher-forced (gold log-prob)."})
    task: str = field(default="", metadata={"help": "Name of the task that built the sample."})
    chat: bool = field(
        default=False,
        metadata={"help": "Prompt went through a chat template (already holds its special tokens)."},
    )
    alt_targets: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "Other forms of the same answer (e.g. opening with a quote); teacher-forced scoring takes the "
            "form the model writes: an exact form if there is one, else the most probable."
        },
    )

    def __post_init__(self) -> None:
        if not self.target or any(not t for t in self.alt_targets):
            raise ValueError(f"sample {self.record_id!r} at position {self.position} has an empty target")

    @property
    def targets(self) -> tuple[str, ...]:
        """The target and its distinct alternatives, the target first."""
        return tuple(dict.fromkeys((self.target, *self.alt_targets)))

    @property
    def prompt(self) -> str:
        """``prefix + query``: what the model sees before answering."""
        return self.prefix + self.query


class Task(ABC):
    """A fitness task: loads records, builds samples, judges greedy answers.

    Subclasses are dataclasses whose fields are the task's settings (validated in ``__post_init__``, before any
    data is read) and register themselves with :func:`rope_adapter.scoring.tasks.register_task`.
    """

    name: ClassVar[str] = ""
    #: extra new tokens allowed beyond the longest tokenised target in greedy scoring
    generation_slack: ClassVar[int] = 8
    #: whether :meth:`is_correct` is meaningful (perplexity has no greedy answer)
    supports_generation: ClassVar[bool] = True
    #: whether the task sweeps the gold position (eval's position sweep and the search's fitness)
    position_sweep: ClassVar[bool] = True
    #: how cards and reports name the task
    display_name: ClassVar[str] = ""
    #: the setting that sets how long a generated record is (kv_retrieval: ``num_pairs``), None when none does; a
    #: search over several record lengths varies it
    length_option: ClassVar[str | None] = None

    @classmethod
    def length_overflow(cls, options: dict[str, Any], max_positions: int | None) -> str | None:
        """Why records made with these settings cannot fit ``max_positions`` positions whatever the tokenizer
        (known from the settings alone, before a record is made), or None. ``options``: the task's settings by
        field name as given, before the task checks them (an open mapping: each task has its own fields)."""
        return None

    @classmethod
    def default_position_count(cls, options: dict[str, Any]) -> int | None:
        """How many gold positions a record is scored at when ``options`` give neither ``positions`` nor
        ``num_positions``, where the settings alone say (None where only the records tell): the task's
        ``num_positions`` default."""
        default = {f.name: f.default for f in dataclasses.fields(cls)}.get("num_positions")
        return default if isinstance(default, int) else None

    @classmethod
    def generates_records(cls, options: dict[str, Any]) -> bool:
        """Whether the task generates its records (from a seed) with these options, rather than reading a file."""
        return "data_path" not in {f.name for f in dataclasses.fields(cls)} or options.get("data_path") is None

    @abstractmethod
    def load_records(self) -> list[Any]:
        """Read or generate the records (validates the data; raises ``ValueError`` naming the problem)."""

    @abstractmethod
    def build_samples(self, records: Sequence[Any]) -> list[Sample]:
        """Samples of the given records at every configured gold position, record-major."""

    def samples(self) -> list[Sample]:
        """``build_samples(load_records())``."""
        return self.build_samples(self.load_records())

    def is_correct(self, prediction: str, sample: Sample) -> bool:
        """The benchmark's rule for a greedy answer (the generated text only, without the prompt)."""
        raise NotImplementedError(f"task {self.name!r} has no greedy answer rule")


def evenly_spaced_positions(num_slots: int, count: int = 5) -> list[int]:
    """``count`` positions evenly spaced over ``0 .. num_slots - 1``, first and last included, rounded half up.

    20 slots give ``[0, 5, 10, 14, 19]``.
    """
    num_slots, count = task_int(num_slots, "num_slots"), task_int(count, "count")
    if num_slots < 1:
        raise TaskError(f"need at least one slot, got {num_slots}")
    if count < 1:
        raise TaskError(f"need at least one position, got {count}")
    if count == 1:
        return [0]
    if count > num_slots:
        raise TaskError(
            f"cannot place {count} distinct gold positions in {num_slots} slots: ask for at most {num_slots} "
            "(--num-positions), give them (--positions), or make the records longer"
        )
    step = (num_slots - 1) / (count - 1)
    return [int(i * step + 0.5) for i in range(count)]


def check_positions(positions: Sequence[int], num_slots: int, what: str) -> list[int]:
    """Validate gold positions (any container of whole numbers) against ``0 .. num_slots - 1``; returns them as a
    list of ints."""
    positions = as_ints(positions, "positions", error=TaskError)
    num_slots = task_int(num_slots, "num_slots")
    if not positions:
        raise TaskError("positions must not be empty")
    bad = [p for p in positions if not 0 <= p < num_slots]
    if bad:
        raise TaskError(f"positions {bad} outside 0..{num_slots - 1} ({num_slots} {what})")
    if len(set(positions)) != len(positions):
        raise TaskError(f"positions must be distinct, got {positions}")
    return positions


def pick_positions(positions: Sequence[int] | None, num_slots: int, num_positions: int, what: str) -> list[int]:
    """The gold positions a task scores: ``positions`` checked against ``0 .. num_slots - 1`` (:func:`check_positions`,
    ``what`` names the slots), or ``num_positions`` evenly spaced when None (:func:`evenly_spaced_positions`)."""
    if positions is None:
        return evenly_spaced_positions(num_slots, num_positions)
    return check_positions(positions, num_slots, what)


def split_records(records: Sequence[R], n_search: int, n_holdout: int, seed: int = 0) -> tuple[list[R], list[R]]:
    """Disjoint search and held-out subsets of the records, drawn by a seeded shuffle.

    The order of the returned records follows the shuffle; the same seed gives the same split.
    """
    n_search, n_holdout, seed = task_int(n_search, "n_search"), task_int(n_holdout, "n_holdout"), task_int(seed, "seed")
    if n_search < 0 or n_holdout < 0:
        raise TaskError(f"n_search and n_holdout must be >= 0, got {n_search} and {n_holdout}")
    if n_search + n_holdout > len(records):
        raise TaskError(
            f"asked for {n_search} search + {n_holdout} held-out records but only {len(records)} are available"
        )
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    search = [records[i] for i in order[:n_search]]
    holdout = [records[i] for i in order[n_search : n_search + n_holdout]]
    return search, holdout


def read_jsonl(path: str | Path, required_keys: Sequence[str] = (), limit: int | None = None) -> list[dict]:
    """Read a ``.jsonl`` or ``.jsonl.gz`` file of JSON objects, checking each has ``required_keys``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is unreadable, empty, not JSON lines (a ``RecordFileError`` naming the line, ``NaN``
            included), or a line misses a required key.
    """
    path = Path(path)
    limit = optional_task_int(limit, "limit", low=0)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[dict] = []
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if limit is not None and len(rows) >= limit:
                    break
                if not line.strip():
                    continue
                row = loads_json(line, path, field=f"line {line_no}")  # strict JSON; a RecordFileError names the line
                if not isinstance(row, dict):
                    raise ValueError(f"{path}: line {line_no} is not a JSON object")
                missing = [key for key in required_keys if key not in row]
                if missing:
                    raise ValueError(
                        f"{path}: line {line_no} misses key(s) {missing}; expected keys {list(required_keys)}"
                    )
                row["_line"] = line_no
                rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read data file {str(path)!r}: {err}") from err
    if not rows:
        raise ValueError(f"data file {str(path)!r} holds no records")
    return rows


def apply_chat_template(samples: Sequence[Sample], tokenizer: Any, system_prompt: str | None = None) -> list[Sample]:
    """Wrap each sample's prompt in the tokenizer's chat template (user message, generation prompt added).

    The templated string is cut where the original query starts, so the template's head joins the prefix (and is
    still shared) and its tail (end of the user turn, assistant header) joins the query. The target loses its
    leading whitespace, since the assistant turn starts fresh. The returned samples have ``chat=True``: their
    text already holds the special tokens, and scoring tokenises them without adding more.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template; drop the chat-template option for this model")
    out = []
    for sample in samples:
        if sample.chat:
            raise ValueError(f"sample {sample.record_id!r} already went through a chat template")
        content = sample.prefix + sample.query
        messages = [{"role": "user", "content": content}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        start = text.find(content)
        if start < 0:
            raise ValueError(
                "the chat template changes the message text (for example trims or escapes it), so the prompt "
                "cannot be split into a shared prefix and a query"
            )
        cut = start + len(sample.prefix)
        target = sample.target.lstrip() or sample.target
        alts = tuple(t.lstrip() or t for t in sample.alt_targets)
        out.append(replace(sample, prefix=text[:cut], query=text[cut:], target=target, alt_targets=alts, chat=True))
    return out
