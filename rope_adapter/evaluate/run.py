"""``run_eval(EvalSettings)``: what ``rope-adapter eval`` runs, from Python.

    from rope_adapter.evaluate import EvalSettings, TaskSettings, run_eval
    result = run_eval(EvalSettings(task=TaskSettings(pairs=20), variants="base,uniform:1.05", out="eval-kv"))
    # or with the flags' names: EvalSettings.flat(task="kv_retrieval", pairs=20, variants=..., out="eval-kv")

Every input is checked before the model's weights are loaded: the settings themselves when they are made, then
the variants (syntax, adapters read and matched against the model's config), the task options, the data, the gold
positions and the prompt lengths. Bad input raises :class:`EvalError` (or :class:`VariantError`) with one line
that names the problem and the fix; the output folder is written only at the end.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rope_adapter import InvalidFactorsError, validate_factors
from rope_adapter.composed import SettingsError, compose, count, field_of, fill_defaults, part, setting
from rope_adapter.embedded.loading import resolve_model_path
from rope_adapter.files import dumps_json
from rope_adapter.identity import file_identity, model_identity
from rope_adapter.scoring.loading import EvalError, load_model_config, resolve_device
from rope_adapter.scoring.metrics import METRICS
from rope_adapter.scoring.settings_parts import DEFAULT_MODEL, TASK_GROUP, ModelSettings, TaskSettings
from rope_adapter.scoring.tasks import available_tasks, position_tasks
from rope_adapter.scoring.variants import check_variants, parse_variants
from rope_adapter.writable import blank_path_reason, unwritable_reason

from ..errors import first_line
from . import evaluation as ev
from .checkpoint import Checkpoint, record_parts, samples_digest
from .extrapolation import default_extrapolation_variants, evaluate_lengths, length_windows, parse_lengths
from .own_outputs import ANALYZE_OUTPUTS, EVAL_OUTPUTS, analyze_wrote, check_own_outputs, eval_wrote
from .results import ResultsFile, RunSettings, SweepResults, environment

SCORES_GROUP = "scores"
PPL_GROUP = "extrapolation (--task perplexity)"
EVAL_ALIASES = {"num_pairs": "pairs", "seed": "data_seed", "task_args": "task_options", "task_arg": "task_options"}
"""Other names of eval's settings (what ``EvalSettings`` and ``--task-arg`` called them), read as the flat names."""


@dataclass
class SampleSettings:
    """The model and the task samples, shared by ``eval`` (:class:`EvalSettings`) and ``analyze``
    (:class:`rope_adapter.evaluate.analyze.AnalyzeSettings`): the model and task parts ``search`` has too
    (:mod:`rope_adapter.scoring.settings_parts`), and which of the task's records are scored."""

    ALIASES: ClassVar[dict[str, str]] = EVAL_ALIASES

    model: ModelSettings = part(ModelSettings, "The model and how it runs.", dtype="float32")
    task: TaskSettings = part(TaskSettings, "The task and its records.")
    adapter: str | None = setting(None, "an LRS adapter (folder or Hub id) for the default variants")
    out: str | Path = setting("eval-results", "output folder")
    num_samples: int = setting(20, "records to evaluate (each at every gold position)", group=TASK_GROUP)
    held_out_after: int = setting(
        0,
        "skip the first N records of the seeded draw (the search records of a study with N records and the same "
        "seed) and evaluate the next --num-samples",
        group=TASK_GROUP,
        metavar="N",
    )
    system_prompt: str | None = setting(None, "system message for the chat template", group=TASK_GROUP)
    progress: bool = setting(True, "no progress bars")

    @classmethod
    def flat(cls, **values: Any) -> Any:
        """The settings of flat keywords, the names the command line uses (``model``, ``task``, ``pairs``,
        ``data_seed``; ``num_pairs``, ``seed`` and ``task_args`` are read as ``pairs``, ``data_seed`` and
        ``task_options``): ``EvalSettings.flat(task="kv_retrieval", pairs=20, variants="base,uniform:1.05")``."""
        return compose(cls, values, aliases=cls.ALIASES, error=EvalError)

    def __post_init__(self) -> None:
        fill_defaults(self)
        if (why := blank_path_reason(self.out, "--out")) is not None:
            raise EvalError(why)
        self.out = Path(self.out)
        self.num_samples = count(self.num_samples, _field("num_samples"), error=EvalError)
        self.held_out_after = count(self.held_out_after, _field("held_out_after"), low=0, error=EvalError)
        if isinstance(self.task.pairs, tuple):
            raise EvalError(
                f"--pairs {' '.join(map(str, self.task.pairs))}: eval scores one record length; give one --pairs "
                "(a search over several lengths is evaluated one length at a time)"
            )

    def task_kwargs(self) -> dict[str, Any]:
        """The task's settings given (the task's own defaults fill the rest), checked against the task: one it does
        not take is an :class:`EvalError` naming its flag."""
        try:
            return self.task.task_kwargs()
        except SettingsError as exc:
            raise EvalError(str(exc)) from None


def _field(name: str) -> Any:
    return field_of(SampleSettings, name)


@dataclass
class EvalSettings(SampleSettings):
    """One evaluation run; the settings are ``rope-adapter eval``'s flags, by flat name (``--max-batch-tokens`` is
    ``model.max_batch_tokens``, ``--no-plot`` is ``plot=False``), built by `rope_adapter.cli.settings_flags`: a new
    setting is one field here or in a part. Checked when made; see `run_eval`::

        EvalSettings(model=ModelSettings(name="smollm2-135m-instruct"), task=TaskSettings(pairs=20),
                     variants="base,uniform:1.05", out="eval-kv")
    """

    variants: str | None = setting(
        None,
        "comma-separated variants: base, uniform:F, adapter:PATH (folder or Hub id), linear:F (PI), "
        "dynamic:F (Dynamic NTK), yarn:F, and mixes joined by '+', e.g. linear:2+adapter:PATH; NAME=SPEC labels "
        "one. Default: base (and adapter:PATH with --adapter); for perplexity base, linear:F, dynamic:F and, "
        "with --adapter, both combined with it",
    )
    reference: str | None = setting(None, "variant the others are compared to (default: the first)")
    scores: str = setting(
        "accuracy,tf_accuracy,logprob",
        "comma-separated: accuracy (greedy decoding), tf_accuracy (teacher-forced: greedy's verdict from the "
        "log-prob pass, no decode loop), logprob (gold log-prob)",
        group=SCORES_GROUP,
    )
    logprob_tokens: int | None = setting(
        None, "average the gold log-prob over the first K target tokens", group=SCORES_GROUP
    )
    max_new_tokens: int | None = setting(
        None,
        "greedy answer length (default: longest target + the task's slack; raise it for chat prompts, where "
        "models restate the question first)",
        group=SCORES_GROUP,
    )
    allow_longer: bool = setting(
        False, "allow prompts longer than the model's trained positions", group=SCORES_GROUP
    )  # fmt: skip
    lengths: str = setting("2k,4k,8k,16k", "context lengths in tokens (k = 1024)", group=PPL_GROUP)
    num_windows: int = setting(4, "windows per length", group=PPL_GROUP)
    stride: int | None = setting(None, "tokens between window starts (default: the window length)", group=PPL_GROUP)
    chunk_tokens: int = setting(1024, "logit rows computed at once (memory bound)", group=PPL_GROUP)
    plot: bool = setting(True, "skip the figure")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("chunk_tokens", "num_windows"):
            setattr(self, name, count(getattr(self, name), field_of(EvalSettings, name), error=EvalError))
        for name in ("logprob_tokens", "max_new_tokens", "stride"):
            value = getattr(self, name)
            setattr(self, name, count(value, field_of(EvalSettings, name), optional=True, error=EvalError))
        if self.variants is not None and not self.variants.replace(",", "").strip():
            raise EvalError("--variants is empty: give e.g. base,uniform:1.1,adapter:PATH (or leave it out for base)")
        if self.variants and self.adapter:
            raise EvalError("--adapter only sets the default variants; with --variants write adapter:PATH there")
        if self.perplexity:
            if not self.task.data:
                raise EvalError(
                    f"--task {self.task.name} needs --data: a UTF-8 text file long enough for the longest --lengths"
                )
            return
        unknown = [s for s in self.score_names if s not in METRICS]
        if unknown or not self.score_names:
            raise EvalError(f"unknown --scores {unknown or self.scores!r}; choose from {', '.join(METRICS)}")
        if self.task.name not in position_tasks():
            raise EvalError(f"unknown task {self.task.name!r}; known tasks: {', '.join(available_tasks())}")

    @property
    def perplexity(self) -> bool:
        """A length sweep (the task sweeps no gold position: perplexity by context length)."""
        return not self.task.task_class().position_sweep

    @property
    def score_names(self) -> list[str]:
        return [s.strip() for s in self.scores.split(",") if s.strip()]


class EvalRunSettings(RunSettings, total=False):
    """What :func:`run_eval` records of its run in results.json's settings (the sweep adds its own)."""

    max_position_embeddings: int | None


@dataclass
class EvalResult:
    """What :func:`run_eval` produced: the results (``PositionResults`` or the length sweep's) and the files."""

    results: SweepResults  # PositionResults or LengthResults
    paths: dict[str, Path]

    def to_dict(self) -> ResultsFile:
        return self.results.to_dict()


def checked_device(name: str) -> Any:
    """``device`` as a torch device, or one EvalError line naming the choices."""

    try:
        return resolve_device(name)
    except (RuntimeError, ValueError) as exc:
        first = first_line(exc)
        raise EvalError(f"--device {name!r}: {first}; use cpu, cuda, cuda:N, mps or auto") from None


def checked_model_config(model: str) -> tuple[Any, Any]:
    """(path, config) of ``model`` without its weights, or one EvalError line."""

    try:
        return load_model_config(model)
    except (OSError, ValueError) as exc:
        first = first_line(exc)
        raise EvalError(
            f"--model {model}: no usable model config ({first}); give a model folder with a config.json, "
            f"a Hub id or {DEFAULT_MODEL}"
        ) from None


def check_out_folder(out: str | Path, command: str = "eval") -> None:
    """Refuse, before any work, an output folder that is a file, cannot be written (read-only, full) or holds
    outputs ``command`` (eval or analyze) did not write."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise EvalError(f"--out {out} is a file: give a folder")
    if (why := unwritable_reason(out, "--out")) is not None:
        raise EvalError(why)
    if command == "analyze":
        check_own_outputs(out, ANALYZE_OUTPUTS, analyze_wrote, command)
    else:
        check_own_outputs(out, EVAL_OUTPUTS, eval_wrote, command)


def check_uniform_factors(variants: list[Any]) -> None:
    """uniform:F must be a factor the adapter accepts (in range), checked before any variant is scored."""

    for variant in variants:
        if variant.uniform is not None:
            try:
                validate_factors(variant.uniform, 1)
            except InvalidFactorsError as exc:
                raise EvalError(f"variant {variant.name!r}: {exc}") from None


def chat_template_flag(task: TaskSettings, tokenizer: Any) -> bool:
    """Whether the prompts go through the tokenizer's chat template (``task.chat_template`` auto/on/off)."""
    try:
        return task.chat(tokenizer)
    except SettingsError as exc:
        raise EvalError(str(exc)) from None


def load_tokenizer(model: ModelSettings, path: str) -> Any:
    """The tokenizer of the model part: its own (``tokenizer``) or the model's at ``path``."""
    return ev.load_tokenizer(resolve_model_path(model.tokenizer) if model.tokenizer else path)


def load_weights(model: ModelSettings, path: str, device: Any) -> Any:
    """The model of the model part in eval mode, its dtype resolved for ``device`` (CPU threads set first)."""
    import torch

    if model.threads is not None:
        torch.set_num_threads(model.threads)
    loaded, _ = ev.load_model(
        path, dtype=ev.resolve_dtype(model.dtype, device), device=device, device_map=model.device_map
    )
    return loaded


def command_line(s: EvalSettings, variants: str) -> str:
    """The command that reproduces this run (recorded in results.json and results.md)."""
    model, task = s.model, s.task
    parts = ["rope-adapter", "eval", "--task", task.name, "--model", model.name, "--variants", variants]
    if s.perplexity:
        parts += ["--data", str(task.data), "--lengths", s.lengths, "--num-windows", str(s.num_windows)]
        parts += ["--chunk-tokens", str(s.chunk_tokens)]
        if s.stride:
            parts += ["--stride", str(s.stride)]
    else:
        parts += ["--num-samples", str(s.num_samples), "--data-seed", str(task.seed), "--scores", s.scores]
        for flag, value in [
            ("--data", task.data),
            ("--positions", ",".join(map(str, task.positions)) if task.positions else None),
            ("--num-positions", task.num_positions),
            ("--pairs", task.pairs),
            ("--num-filler", task.num_filler),
            ("--num-documents", task.num_documents),
            ("--held-out-after", s.held_out_after or None),
            ("--logprob-tokens", s.logprob_tokens),
            ("--max-new-tokens", s.max_new_tokens),
            ("--system-prompt", s.system_prompt),
        ]:
            if value is not None:
                parts += [flag, str(value)]
        for key, value in task.options.items():
            parts += ["--task-option", f"{key}={dumps_json(value, where='--task-option', field=key)}"]
        parts += ["--chat-template", task.chat_template]
        if s.allow_longer:
            parts.append("--allow-longer")
    for flag, value in [("--tokenizer", model.tokenizer), ("--device-map", model.device_map)]:
        if value is not None:
            parts += [flag, value]
    if model.threads is not None:
        parts += ["--threads", str(model.threads)]
    parts += ["--batch-size", str(model.batch_size)]
    if model.max_batch_tokens is not None:
        parts += ["--max-batch-tokens", str(model.max_batch_tokens)]
    parts += ["--dtype", str(model.dtype), "--device", model.device]
    if s.reference:
        parts += ["--reference", s.reference]
    parts += ["--out", str(s.out)]
    return shlex.join(parts)


def run_eval(settings: EvalSettings, log: Callable[[str], None] = print) -> EvalResult:
    """Check everything, load the model, score every variant, write ``results.json``/``.md`` and the plot."""
    s = settings
    model, task = s.model, s.task
    check_out_folder(s.out)
    # 1. variants (syntax) and lengths, before anything is read
    lengths = None
    if s.perplexity:
        lengths = parse_lengths(s.lengths)
    variant_text = s.variants or "base" + (f",adapter:{s.adapter}" if s.adapter else "")
    variants = parse_variants(variant_text)  # syntax only; the perplexity default needs the config
    check_uniform_factors(variants)

    # 2. the model's config (no weights): adapters and RoPE types are checked against it
    path, config = checked_model_config(model.name)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    max_positions = getattr(text_config, "max_position_embeddings", None)
    if max_positions and s.max_new_tokens and s.max_new_tokens >= max_positions:
        raise EvalError(
            f"--max-new-tokens {s.max_new_tokens} leaves no room for a prompt in the model's {max_positions} "
            "positions: give fewer (the answers are a few tokens long; the default fits them)"
        )
    if not s.perplexity and (why := task.too_long(max_positions)) is not None:
        raise EvalError(why)
    if s.perplexity and not s.variants:
        variant_text = default_extrapolation_variants(lengths, max_positions or max(lengths), s.adapter)
        variants = parse_variants(variant_text)
    plans = check_variants(variants, config)
    if s.reference and s.reference not in [v.name for v in variants]:
        raise EvalError(f"--reference {s.reference!r} is not one of the variants {[v.name for v in variants]}")
    device = checked_device(model.device)
    dtype = str(ev.resolve_dtype(model.dtype, device)).removeprefix("torch.")

    # 3. tokenizer and data (still no weights)
    tokenizer = load_tokenizer(model, path)
    recorded: EvalRunSettings = {
        "model": model.name,
        "model_path": str(path),
        "model_type": getattr(text_config, "model_type", None),
        "num_layers": getattr(text_config, "num_hidden_layers", None),
        "max_position_embeddings": max_positions,
        "dtype": dtype,
        "device": str(device),
        "seed": task.seed,
        "command": command_line(s, variant_text),
    }
    if s.perplexity:
        windows = length_windows(task.data, tokenizer, lengths, num_windows=s.num_windows, stride=s.stride)
        recorded.update({"data_path": str(task.data), "stride": s.stride})
        log(
            f"perplexity at {', '.join(map(str, lengths))} tokens: "
            f"{', '.join(str(len(w)) for w in windows.values())} window(s); {len(variants)} variant(s)"
        )
    else:
        made, samples = ev.make_task_samples(
            task.name, num_samples=s.num_samples, seed=task.seed, held_out_after=s.held_out_after, **s.task_kwargs()
        )
        chat = chat_template_flag(task, tokenizer)
        prepared = ev.prepare_samples(samples, tokenizer, made, chat_template=chat, system_prompt=s.system_prompt)
        for line in ev.check_context([len(p) for p in prepared.prompt_ids], max_positions, allow_longer=s.allow_longer):
            log(f"note: {line}")
        recorded["task_settings"] = {
            k: v for k, v in vars(made).items() if k != "tokenizer" and isinstance(v, str | int | float | list | None)
        }
        # what pooling (`rope-adapter compare`) checks beside the layout: the weights, data and tokenizer by what
        # they hold (no local path), the system prompt and --max-new-tokens
        recorded["model_identity"] = model_identity(model.name)  # as the search names it: an embedded model by its GGUF
        if task.data:
            recorded["data_identity"] = file_identity(Path(task.data).expanduser())
        recorded["tokenizer"] = model_identity(model.tokenizer) if model.tokenizer else None
        recorded["system_prompt"] = s.system_prompt
        recorded["max_new_tokens_option"] = s.max_new_tokens
        positions = sorted({x.position for x in samples})
        log(
            f"{task.name}: {len({x.record_id for x in samples})} records x {len(positions)} positions "
            f"{positions} = {len(samples)} samples; {len(variants)} variant(s); chat template {'on' if chat else 'off'}"
        )

    checkpoint = None
    if not s.perplexity:  # finished parts of records are kept in --out: the same command resumes after them
        identity = {
            "settings": {k: v for k, v in recorded.items() if k != "command"},  # the model by what it holds too
            "samples": samples_digest(prepared),
            "scores": [s.score_names, s.logprob_tokens, s.max_new_tokens, s.system_prompt, chat],
            "batching": [model.batch_size, model.max_batch_tokens],
            # parts scored by other releases are not joined (an upgrade may change a score)
            "versions": {
                k: v for k, v in environment().items() if k in ("rope_adapter", "torch", "transformers", "peft")
            },
        }
        checkpoint = Checkpoint(s.out, identity, [len(p) for p in record_parts(prepared, model.batch_size)])
        if checkpoint.stale:
            log(
                f"note: {checkpoint.path} is another run's progress (other settings or data) or damaged: starting afresh"
            )

    # 4. the model
    log(f"loading {model.name} ({dtype}, {device})")
    weights = load_weights(model, path, device)
    common = {"plans": plans, "batch_size": model.batch_size, "reference": s.reference, "progress": s.progress}
    common |= {"log": log, "settings": recorded}
    if s.perplexity:
        results = evaluate_lengths(
            weights, windows, variants, chunk_tokens=s.chunk_tokens, max_batch_tokens=model.max_batch_tokens or 8192,
            **common,
        )  # fmt: skip
    else:
        results = ev.evaluate_positions(
            weights,
            tokenizer,
            made,
            samples,
            variants,
            metrics=s.score_names,
            logprob_tokens=s.logprob_tokens,
            max_new_tokens=s.max_new_tokens,
            chat_template=chat,
            system_prompt=s.system_prompt,
            max_batch_tokens=model.max_batch_tokens or 4096,
            prepared=prepared,
            checkpoint=checkpoint,
            **common,
        )
    try:
        paths = results.write(s.out, plot=s.plot)
    except OSError as exc:
        raise EvalError(f"the run finished but writing its results to {s.out} failed: {exc}") from None
    if checkpoint is not None:
        checkpoint.remove()
    return EvalResult(results, paths)
