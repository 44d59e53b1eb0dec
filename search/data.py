"""The records of a search: the task object of the settings, the search/held-out split and the perplexity text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rope_adapter import files
from rope_adapter.composed import SettingsError
from rope_adapter.scoring.tasks import Task, TaskError, build, split_records, task_options

from .lengths import is_multi, keyed_samples, study_lengths
from .settings import SearchError, SearchSettings

DEFAULT_PERPLEXITY_TEXT = """\
The river rises in the hills to the north of the town and runs south through a wide valley of farms and small
woods before it reaches the sea. For most of the year it is slow and shallow, and children wade across it in the
summer to reach the meadows on the other side. In the spring, when the snow melts in the hills, the water comes
up quickly and covers the lower fields, and the farmers move their animals to higher ground until it goes down
again. The old stone bridge in the middle of the town was built more than two hundred years ago, and it has
survived every flood since then, although the road that crosses it has been repaired many times.

The town itself grew up around a market where people from the surrounding villages came to sell grain, wool and
vegetables. The market square is still there, with a fountain in the middle and a row of shops along each side,
and on Saturdays it fills with stalls selling bread, cheese, fruit and flowers. Most of the houses are built of
the same grey stone as the bridge, with steep roofs of dark slate, and many of them have small gardens at the
back that run down to the water.

In recent years the town has changed. A new road now passes to the east, and the traffic that once came through
the square goes around it instead. Some of the old shops have closed, but others have opened in their place, and
visitors come in the summer to walk along the river and to look at the bridge. The school has been enlarged, and
a library and a small museum have been built on the site of the old mill, where the history of the valley is
told through photographs, tools and letters that families have given to the collection.
"""


def build_task(settings: SearchSettings, num_records: int | None = None) -> Task:
    """The task object of the settings' task part: its settings checked against the task as eval checks them (the
    record size and position count a search always records are left out for a task without them), each value by
    the task's own ``__post_init__``."""
    task = settings.task
    names = set(task_options(task.name))
    own = {"seed": task.seed} if "seed" in names else {}
    if "num_records" in names and num_records is not None:
        own["num_records"] = num_records
    try:
        kwargs = own | task.task_kwargs(skip=("num_pairs", "num_positions"))
    except SettingsError as exc:
        raise SearchError(str(exc)) from None
    try:
        return build(task.name, **kwargs)
    except FileNotFoundError as exc:
        raise SearchError(f"{exc}; check --data") from None
    except TaskError as exc:
        raise SearchError(f"task {task.name!r}: {str(exc).removeprefix(f'task {task.name!r}: ')}") from None


def load_split(settings: SearchSettings) -> tuple[Task, list[Any], list[Any]]:
    """The task and its search and held-out records (read or generated, then split with ``data_seed``)."""
    needed = settings.search_records + settings.holdout_records
    # files: read them all (the split draws from the whole file); generated: just what is needed
    task = build_task(settings, None if settings.task.data is not None else needed)
    try:
        records = task.load_records()
    except FileNotFoundError as exc:
        raise SearchError(f"{exc}; check --data") from None
    except (ValueError, OSError) as exc:
        raise SearchError(f"cannot use the data of task {settings.task.name!r}: {exc}") from None
    if len(records) < needed:
        raise SearchError(
            f"{len(records)} records available but {settings.search_records} search + "
            f"{settings.holdout_records} held-out records asked for; lower --search-records/--holdout-records"
        )
    if settings.task.data is not None and settings.confirm_top and len(records) < needed + settings.confirm_records:
        raise SearchError(
            f"{len(records)} records available but {settings.search_records} search + {settings.holdout_records} "
            f"held-out + {settings.confirm_records} confirmation records asked for; lower --confirm-records (or "
            "--search-records/--holdout-records), or --confirm-top 0 to choose on the search set"
        )
    search, holdout = split_records(records, settings.search_records, settings.holdout_records, settings.task.seed)
    try:
        task.build_samples(search[:1])  # positions against the records (e.g. a position beyond the pairs)
    except ValueError as exc:
        raise SearchError(f"task {settings.task.name!r}: {exc}") from None
    return task, search, holdout


def load_confirmation(settings: SearchSettings) -> list[Any]:
    """The confirmation records: disjoint from the search and held-out ones, from the same seeded draw, and leaving
    those two exactly as they are without confirmation. A data file: the next ``confirm_records`` records of the
    split's shuffle; generated records: the next ones the seeded generator makes after the search and held-out
    ones. Empty when ``confirm_top`` is 0."""
    if not settings.confirm_top:
        return []
    needed = settings.search_records + settings.holdout_records
    if settings.task.data is not None:
        records = build_task(settings).load_records()  # load_split checked that the file holds enough
        return split_records(records, needed, settings.confirm_records, settings.task.seed)[1]
    return build_task(settings, needed + settings.confirm_records).load_records()[needed:]


LengthSplit = tuple[int | None, Task, list[Any], list[Any], list[Any]]
"""(record length, or None in a single-length study; the task; search, held-out and confirmation records)."""

SEARCH, HOLDOUT, CONFIRM = 0, 1, 2
"""Which records of a :data:`LengthSplit` (:func:`length_samples`'s ``part``)."""


def length_splits(settings: SearchSettings) -> list[LengthSplit]:
    """The records of every record length of the study, each split as a study of that length alone splits them
    (a single-length study: its one split, as :func:`load_split` and :func:`load_confirmation` give it)."""
    if not is_multi(settings.task.pairs):
        task, search, holdout = load_split(settings)
        return [(None, task, search, holdout, load_confirmation(settings))]
    out: list[LengthSplit] = []
    for pairs in study_lengths(settings.task.pairs):
        one = settings.updated(pairs=pairs)
        task, search, holdout = load_split(one)
        out.append((pairs, task, search, holdout, load_confirmation(one)))
    return out


def length_samples(splits: list[LengthSplit], part: int, first: int = 0, last: int | None = None) -> list[Any]:
    """The samples of records ``first:last`` of one part (:data:`SEARCH`, :data:`HOLDOUT`, :data:`CONFIRM`) at
    every length, length by length; in a multi-length study each sample's position is its (length, position)
    key (:mod:`search.lengths`)."""
    samples: list[Any] = []
    for pairs, task, *parts in splits:
        records = parts[part][first:last]
        if not records:
            continue
        built = task.build_samples(records)
        samples += built if pairs is None else keyed_samples(built, pairs)
    return samples


PART_RECORDS = 4
"""Confirmation and held-out records scored (and kept in the study) together: a stopped confirmation or held-out step
resumes at the first part not kept, so it loses at most this many records of one length."""


def part_samples(splits: list[LengthSplit], part: int, size: int) -> list[list[Any]]:
    """The samples of one part (:data:`SEARCH`, :data:`HOLDOUT`, :data:`CONFIRM`) in pieces of at most ``size``
    records of one length, in :func:`length_samples`'s order: their concatenation is ``length_samples(splits,
    part)``."""
    pieces = []
    for split in splits:
        for first in range(0, len(split[2 + part]), size):
            pieces.append(length_samples([split], part, first, first + size))
    return pieces


def perplexity_text_path(settings: SearchSettings) -> Path | None:
    """The perplexity guard's text file (the built-in text is written into ``out`` so that it can be read)."""
    if settings.space.max_ppl_increase is None:
        return None
    if settings.space.ppl_text is not None:
        path = Path(settings.space.ppl_text)
        try:
            if not path.read_text(encoding="utf-8").strip():
                raise SearchError(f"perplexity text {str(path)!r} is empty")
        except (OSError, UnicodeDecodeError) as exc:
            raise SearchError(f"cannot read perplexity text {str(path)!r}: {exc}") from None
        return path
    path = Path(settings.out) / "perplexity_text.txt"
    if not path.is_file() or path.read_text(encoding="utf-8") != DEFAULT_PERPLEXITY_TEXT:
        files.write_text(path, DEFAULT_PERPLEXITY_TEXT)
    return path
