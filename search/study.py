"""The factor search as an Optuna study: settings, storage, workers, baselines, held-out check and outputs.

``run_search(SearchSettings(...))`` (and ``rope-adapter search``) runs, in this order:

1. **Checks, before anything heavy** (:class:`SearchError`, one line each): the settings and the search space
   (bounds that leave no factor set), the task name and its data file (the records are read and split here), the
   storage URL (connected to; a password never appears in messages or outputs), and an existing study of the same
   name, whose stored settings must equal these ones.
2. **The study**: created once with its settings in ``user_attrs`` and its baselines enqueued as its first trials:
   the unscaled model (all ones) and a few uniform factors. A study that exists is resumed: finished trials stay,
   numbering continues, and ``trials`` counts the study's finished trials, so only the rest is run.
3. **Workers**: this process plus ``workers - 1`` spawned processes each load the model once, tokenise the
   samples once, and run trials that only swap factors in place (:func:`rope_adapter.set_factors`). They share the
   study through its storage: a local SQLite file by default, or any Optuna RDB URL (PostgreSQL, MySQL), so
   workers on several machines can join one study by running the same command with the same ``--storage`` and
   ``--study``. Each worker has its own seeded sampler (``settings.study.sampler``, :mod:`search.samplers`; seed from
   ``seed``, the worker's index and the number of trials already in the study). A heartbeat marks the trial of a killed worker as failed once it is
   ``2 * heartbeat`` seconds stale, and its parameters are enqueued again.
4. **Confirmation** (:mod:`search.confirm`): the best ``confirm_top`` searched curves and uniform factors on the
   search set are re-scored on fresh confirmation records; the adapter and the best uniform factor are chosen
   there, and each candidate's selection gap is reported. Its scores are kept in the study (not scored again).
5. **Outputs** (``out``): the chosen adapter (``adapter/``, a standard LRS adapter with its provenance), the
   held-out comparison of the unscaled model, the best uniform factor and the found factors, ``search_report.json``,
   ``search_report.md``, ``pareto.png``, ``factors.png`` and ``positions.png``.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from rope_adapter.provenance import Provenance

from . import report as report_mod
from .adapter_provenance import provenance as provenance_of
from .confirm import run_confirmation
from .constraints import FactorConstraints
from .data import length_splits, perplexity_text_path
from .fingerprint import study_fingerprint
from .holdout import add_holdout
from .interrupts import storage_safe_interrupts
from .outputs import check_own_outputs, check_writable, output_errors
from .quiet import quiet_optuna
from .report_lengths import length_entries
from .report_types import SearchReport
from .selection import choose, trial_record
from .settings import SearchError, SearchSettings, public_storage, redact_url
from .storage import check_existing_study, create_or_load_study, resolve_sampler
from .storage_failures import storage_errors
from .storage_url import open_storage
from .trial import TrialProgress, complete_trials, constraint_names, run_worker, worker_entry
from .worker import (
    Worker,
    check_prompt_lengths,
    check_record_size,
    make_worker,
    read_num_layers,
    resolve_device,
    resolve_dtype,
)

__all__ = ["SearchResult", "check_search", "check_stored_study", "run_search", "save_adapter"]


@dataclass
class SearchResult:
    """What a search produced (paths and the headline numbers; everything else is in the report)."""

    out_dir: Path
    adapter_dir: Path | None
    report_path: Path
    report: SearchReport
    study_name: str
    storage: str  # without password
    chosen_trial: int | None
    factors: list[float] | None


def check_search(settings: SearchSettings, *, model: Any = None, tokenizer: Any = None) -> None:
    """Every check :func:`run_search` makes before it writes anything (:class:`SearchError`): the settings, the
    task and its data (read and split), the model's config, a search space with a factor set, and prompt lengths
    within the model's positions. Reads only configs, the tokenizer and the data: no weights, no files written."""
    settings.check()
    check_own_outputs(settings)
    check_record_size(settings)
    split = length_splits(settings)  # reads and checks the data now (workers read it again, deterministically)
    num_layers = int(model.config.num_hidden_layers) if model is not None else read_num_layers(settings)
    constraints = FactorConstraints(
        settings.space.bezier(),
        num_layers,
        settings.parsed_layer_bounds(),
        settings.space.max_step,
        tuple(settings.space.constraints),
    )
    try:
        constraints.check_feasible_space()
    except ValueError as exc:
        raise SearchError(str(exc)) from None
    check_prompt_lengths(settings, model=model, tokenizer=tokenizer, split=split)


def check_stored_study(settings: SearchSettings) -> None:
    """When the settings' SQLite study file exists already, check that its study (if it holds one of this name)
    has equal settings (:class:`SearchError` otherwise), so that a resumed run is refused before other work."""
    from sqlalchemy.engine import make_url  # not at the top: sqlalchemy adds 0.3 s to every CLI command

    url = settings.storage_url()
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or not Path(parsed.database).is_file():
        return
    storage = open_storage(url, settings.study.heartbeat)
    with quiet_optuna():
        settings = resolve_sampler(settings, storage)
        fingerprint = study_fingerprint(
            settings, resolve_dtype(settings.model.dtype, resolve_device(settings.model.device))
        )
        check_existing_study(storage, settings.study.name, fingerprint)


def run_search(settings: SearchSettings, *, model: Any = None, tokenizer: Any = None) -> SearchResult:
    """Run (or resume) a factor search and write its outputs; see the module docstring for the steps.

    Args:
        settings: the search settings.
        model: an already loaded model (optional; then ``settings.model.name`` only names it in the study). Spawned
            workers (``workers > 1``) still load ``settings.model.name`` themselves.
        tokenizer: the loaded model's tokenizer (optional, with ``model``).

    Raises:
        SearchError: bad input (before any heavy work).
        KeyboardInterrupt: Ctrl-C, raised outside storage calls (`rope_adapter.search.interrupts`), so that the running
            trial is recorded as failed (and run again on resume).
    """
    with storage_safe_interrupts():
        return _run_search(settings, model=model, tokenizer=tokenizer)


def _run_search(settings: SearchSettings, *, model: Any, tokenizer: Any) -> SearchResult:
    started = time.time()
    deadline = started + settings.study.budget if settings.study.budget is not None else None
    check_search(settings, model=model, tokenizer=tokenizer)
    out = Path(settings.out)
    spec = settings.objective_spec()
    url = settings.storage_url()
    shown_url = redact_url(url)
    created = not out.exists()
    try:  # the first writes: a failure here leaves no --out behind that this run made
        check_writable(out)
        perplexity_text_path(settings)
        storage = open_storage(url, settings.study.heartbeat)
        with quiet_optuna(), storage_errors(shown_url):
            settings = resolve_sampler(settings, storage)  # a resumed study keeps its own; new ones get the default
        device = resolve_device(settings.model.device)
        dtype = resolve_dtype(settings.model.dtype, device)
        fingerprint = study_fingerprint(settings, dtype)
        check_existing_study(storage, settings.study.name, fingerprint)
        with quiet_optuna(), storage_errors(shown_url):
            create_or_load_study(
                storage,
                settings.study.name,
                spec.directions,
                fingerprint,
                settings.space.bezier(),
                settings.uniform_values(),
            )
    except SearchError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise

    # ---- heavy work from here on -----------------------------------------------------------------------------
    worker = make_worker(settings, 0, model=model, tokenizer=tokenizer)
    children: list[Any] = []
    errors = None
    if settings.study.workers > 1:
        context = mp.get_context("spawn")
        errors = context.Queue()
        go = context.Event()
        readies = []
        for index in range(1, settings.study.workers):
            ready = context.Event()
            process = context.Process(
                target=worker_entry, args=(settings, index, ready, go, errors, deadline), daemon=False
            )
            process.start()
            children.append(process)
            readies.append(ready)
        for ready, process in zip(readies, children, strict=True):  # start together, once all are loaded
            while not ready.wait(timeout=1.0) and process.is_alive():
                pass
        go.set()

    with quiet_optuna():
        done_before = len(complete_trials(optuna.load_study(study_name=settings.study.name, storage=storage)))
    progress = TrialProgress(settings.progress, settings.study.trials, done_before, spec.names)
    search_started = time.time()
    try:
        with storage_errors(shown_url, during_search=True):
            run_info = run_worker(worker, storage, deadline, progress)
    except BaseException:
        for process in children:
            if process.is_alive():
                process.terminate()
        raise
    finally:
        for process in children:
            process.join()
        progress.close()
    search_seconds = time.time() - search_started
    failures = []
    while errors is not None and not errors.empty():
        failures.append(errors.get())
    failures += [
        f"worker {i + 1} exited with code {p.exitcode}" for i, p in enumerate(children) if p.exitcode and not failures
    ]
    if failures:  # the study itself is intact: report what the other workers and this one finished
        warnings.warn("worker process(es) failed: " + "; ".join(failures), RuntimeWarning, stacklevel=2)

    with quiet_optuna():
        study = optuna.load_study(study_name=settings.study.name, storage=storage)
        trials = study.get_trials(deepcopy=False)
    spec_records = [trial_record(t) for t in trials]
    found, uniform, _ = choose(spec_records, spec, settings.objective.select)
    with storage_errors(shown_url, during_search=True):
        confirmation = run_confirmation(
            study,
            trials,
            worker,
            (None if found is None else found["number"], None if uniform is None else uniform["number"]),
        )
    report = report_mod.build_report(
        settings=settings,
        worker=worker,
        trials=trials,
        constraint_names=constraint_names(worker),
        storage=public_storage(url),
        sampler_seed=run_info.get("seed"),
        search_seconds=search_seconds,
        trials_this_run=run_info.get("ran", 0),
        confirmation=confirmation,
    )
    adapter_dir = None
    chosen = report.get("chosen")
    if chosen is not None:
        with storage_errors(shown_url, during_search=True):
            add_holdout(report, worker, study)
        adapter_dir = out / "adapter"
        with output_errors(out):
            save_adapter(worker, chosen["factors"], provenance_of(report), adapter_dir)
    report["by_length"] = length_entries(report)
    report["study"]["worker_errors"] = failures
    report["timing"]["total_seconds"] = time.time() - started
    with output_errors(out):
        report_path = report_mod.write_outputs(report, out)
    return SearchResult(
        out_dir=out,
        adapter_dir=adapter_dir,
        report_path=report_path,
        report=report,
        study_name=settings.study.name,
        storage=shown_url,
        chosen_trial=None if chosen is None else chosen["number"],
        factors=None if chosen is None else chosen["factors"],
    )


def save_adapter(worker: Worker, factors: Sequence[float], provenance: Provenance, folder: Path) -> None:
    """Write the chosen factors as a standard LRS adapter folder with its provenance."""
    model = worker.model
    worker.evaluator.set_factors(factors)
    config = model.peft_config["default"]
    previous = config.provenance
    config.provenance = provenance
    try:
        model.save_pretrained(str(folder))
    finally:
        config.provenance = previous
