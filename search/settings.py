"""The settings of a factor search, :class:`SearchSettings`, made of parts (:mod:`rope_adapter.composed`): the model
and the task (the parts ``eval`` shares: :mod:`rope_adapter.scoring.settings_parts`), the objective, the search space
and the study (:mod:`search.settings_parts`), and the search's own record counts and output folder. Checked when
made: each part checks its fields, :meth:`SearchSettings.check` what joins them.

Every field carries a ``help`` text; the CLI builds its flags from the fields, under their flat names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rope_adapter.composed import compose, fill_defaults, flat_fields, flatten, part, setting
from rope_adapter.json_types import JsonObject
from rope_adapter.numbers import as_int
from rope_adapter.scoring.settings_parts import ModelSettings, TaskSettings
from rope_adapter.writable import blank_path_reason

from .constraints import LayerBound
from .objective import ObjectiveSpec
from .racing import stage_ends
from .settings_parts import (
    DEFAULT_UNIFORM,
    ObjectiveSettings,
    SearchError,
    SpaceSettings,
    StudySettings,
)

__all__ = [
    "DEFAULT_UNIFORM",
    "ModelSettings",
    "ObjectiveSettings",
    "SearchError",
    "SearchSettings",
    "SpaceSettings",
    "StudySettings",
    "TaskSettings",
    "public_storage",
    "redact_url",
    "settings_dict",
    "settings_help",
]

SEARCH_DEFAULT_PAIRS = 20
"""Key-value pairs per record when a search is not told (the task's own default, recorded in every study)."""


@dataclass
class SearchSettings:
    """Everything a search needs, in parts::

        SearchSettings(
            model=ModelSettings(name="qwen2.5-coder-0.5b-instruct", dtype="bfloat16"),
            task=TaskSettings(pairs=(50, 75), num_positions=10, seed=100),
            space=SpaceSettings(degree=2, s_min=0.8, s_max=1.25),
            study=StudySettings(sampler="gp", budget=8100),
            search_records=16,
            out="runs/qwen",
        )

    or with the flat names the command line uses: ``SearchSettings.flat(model=..., pairs=(50, 75), ...)``. A setting
    is read from its part (``settings.task.pairs``, ``settings.study.trials``; :meth:`to_flat` gives them all by flat
    name). Every field has a ``help`` text (the CLI's ``--help`` is built from them).
    """

    model: ModelSettings = part(
        ModelSettings, "The model and how it runs.", dtype="auto", max_batch_tokens=4096
    )  # fmt: skip
    task: TaskSettings = part(
        TaskSettings, "The task and its records.", pairs=SEARCH_DEFAULT_PAIRS
    )  # fmt: skip
    objective: ObjectiveSettings = part(ObjectiveSettings, "The objective values and the chosen trial.")
    space: SpaceSettings = part(SpaceSettings, "The search space and its constraints.")
    study: StudySettings = part(StudySettings, "The Optuna study: length, storage, sampler, racing.")
    search_records: int = setting(
        20, "Records scored by every trial (each record gives one sample per gold position)."
    )  # fmt: skip
    holdout_records: int = setting(
        30, "Other records, scored only at the end for base, best uniform and found factors."
    )  # fmt: skip
    confirm_top: int = setting(
        3,
        "Confirmation: after the search, the best this many searched curves and uniform factors on the search set are "
        "re-scored on --confirm-records fresh records, and the adapter and the best uniform factor are chosen there "
        "(0: choose on the search set). 3 with 60 records: the best expected held-out score within the cost of 5 "
        "fully scored trials when the committed Qwen and SmolLM2 studies are replayed (benchmarks/confirmation_k.py).",
        metavar="K",
    )
    confirm_records: int = setting(
        60,
        "Confirmation: records, disjoint from the search and held-out ones (the next records of the same seeded draw), "
        "on which the top curves are re-scored; the report shows each one's selection gap (search-set score minus "
        "confirmation score). 60: see --confirm-top; fewer records make the chosen curve's gap noisier.",
        metavar="N",
    )
    holdout_accuracy: bool = setting(False, "Also report greedy accuracy on the held-out records (slower).")
    out: str = setting(
        "lrs-search", "Output folder (adapter/, search_report.json, .md and plots; study.db by default)."
    )  # fmt: skip
    progress: bool = setting(True, "Show a progress bar.")

    # ---------------------------------------------------------------------------------------------------------
    @classmethod
    def flat(cls, **values: Any) -> SearchSettings:
        """The settings of flat keywords, the names the command line uses (``model``, ``task``, ``pairs``,
        ``data_seed``, ``study``...): ``SearchSettings.flat(model="smollm2-135m-instruct", pairs=10, trials=60)``."""
        return compose(cls, values, error=SearchError)

    def to_flat(self) -> dict[str, Any]:
        """Every setting under its flat name (what :meth:`flat` takes)."""
        return flatten(self)

    def updated(self, **values: Any) -> SearchSettings:
        """These settings with some changed, by flat name (checked again)."""
        return SearchSettings.flat(**{**self.to_flat(), **values})

    def objective_spec(self) -> ObjectiveSpec:
        """Score kind, k and objective (several record lengths: the position weights repeated for each)."""
        return self.objective.spec(max(1, len(self.task.record_lengths)))

    def parsed_layer_bounds(self) -> tuple[LayerBound, ...]:
        """``layer_bounds`` parsed."""
        return self.space.parsed_layer_bounds()

    def uniform_values(self) -> list[float]:
        """The uniform baselines to enqueue (the defaults are filtered to the bounds; given ones must fit)."""
        return self.space.uniform_values()

    def storage_url(self) -> str:
        """The storage URL (the default SQLite file sits in ``out``)."""
        if self.study.storage:
            return self.study.storage
        return "sqlite:///" + str((Path(self.out) / "study.db").resolve())

    def __post_init__(self) -> None:
        fill_defaults(self)
        self.check()

    def check(self) -> None:
        """Validate what joins the parts and the search's own fields (each part checked itself when made); needs
        neither data, storage nor model; raises :class:`SearchError`. Runs when the settings are made."""
        for name in ("search_records", "holdout_records", "confirm_top", "confirm_records"):
            setattr(self, name, as_int(getattr(self, name), name, error=SearchError))
        if self.search_records < 1:
            raise SearchError(f"search_records must be an integer >= 1, got {self.search_records!r}")
        if self.holdout_records < 0:
            raise SearchError(f"holdout_records must be >= 0, got {self.holdout_records}")
        if self.confirm_top < 0:
            raise SearchError(f"confirm_top must be >= 0 (0: no confirmation), got {self.confirm_top}")
        if self.confirm_top and self.confirm_records < 1:
            raise SearchError(
                f"confirm_records must be >= 1 when confirm_top is {self.confirm_top}, got {self.confirm_records}; "
                "or set --confirm-top 0 to choose on the search set"
            )
        if (why := blank_path_reason(self.out, "out")) is not None:
            raise SearchError(why)
        self._check_task()
        try:
            stage_ends(self.search_records, self.study.race)
        except (TypeError, ValueError) as exc:
            raise SearchError(f"race: {exc}") from None
        weights = self.objective.position_weights
        if weights is not None:
            count = self.task.position_count()
            if count is None:
                raise SearchError(
                    f"{len(weights)} position weights, but the number of gold positions is known only from the "
                    "records (or differs between lengths): give the positions (--positions P1 P2 ...) or their "
                    "number (--num-positions N) with --position-weights"
                )
            if len(weights) != count:
                raise SearchError(
                    f"{len(weights)} position weights for {count} gold positions: give one weight per "
                    "position (--position-weights W1 W2 ...)"
                )

    def _check_task(self) -> None:
        task = self.task
        if isinstance(task.data, list | tuple):  # --data FILE ...: one file is that file
            given = [os.fspath(f) for f in task.data]
            if len(given) != 1:
                raise SearchError(
                    f"--data takes one file, got {len(given)} ({', '.join(given) or 'none'}): a study reads its "
                    "records from one file, at that file's one record length; for a study over several lengths "
                    "leave out --data and give them (--pairs 75 140: kv_retrieval generates records of each "
                    "length), or run one search per file, each with its own --out"
                )
            task.data = given[0]
        cls = task.task_class()
        if not cls.position_sweep:
            raise SearchError(f"{task.name} is a guard, not a fitness task: use --max-ppl-increase (and --ppl-text)")
        if task.chat_template == "auto":
            raise SearchError("--chat-template auto: a search takes on or off (its study records which)")
        if isinstance(task.pairs, tuple) and not task.varies_length():
            raise SearchError(
                f"several record lengths (--pairs {' '.join(map(str, task.pairs))}) need a task that generates its "
                "records at a given length (kv_retrieval without --data); give one --pairs for this task"
            )


def settings_help(name: str) -> str:
    """The help text of a setting, by flat name (used by the CLI)."""
    return flat_fields(SearchSettings)[name].field.metadata["help"]


def settings_dict(settings: SearchSettings) -> JsonObject:
    """The settings of a report (``search_report.json``'s ``settings``), by flat name and JSON-friendly: user
    constraint callables by name, the storage as :func:`public_storage` writes it, the chat template as the switch a
    search takes (on: true); :meth:`SearchSettings.flat` takes the others back as they are."""
    data = replace(settings, space=replace(settings.space, constraints=())).to_flat()
    data["constraints"] = [getattr(c, "__qualname__", repr(c)) for c in settings.space.constraints]
    data["storage"] = public_storage(settings.storage_url())
    data["chat_template"] = settings.task.chat_template == "on"
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def public_storage(url: str) -> str:
    """How reports, provenance and cards record a storage URL: an SQLite file by its name only
    (``sqlite:///study.db``, so a study folder copied to another machine is still recognised and no local path
    is published), any other URL without its user name and password (``postgresql://host:5432/db``)."""
    if url.startswith("sqlite:///"):
        return "sqlite:///" + Path(url[len("sqlite:///") :]).name
    return redact_url(url, keep_user=False)


def redact_url(url: str, keep_user: bool = True) -> str:
    """The storage URL without its password (for messages to the user), and with ``keep_user=False`` without its
    user name either (for reports, provenance and cards: :func:`public_storage`)."""
    try:
        from sqlalchemy.engine import URL, make_url  # not at the top: sqlalchemy adds 0.3 s to every CLI command

        parsed = make_url(url)
        if parsed.password is None and (keep_user or parsed.username is None):
            return url
        user = parsed.username if keep_user else None
        bare = URL.create(parsed.drivername, user, None, parsed.host, parsed.port, parsed.database, parsed.query)
        return bare.render_as_string(hide_password=False)
    except Exception:
        if "://" in url and "@" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url
