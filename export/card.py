"""Model cards for a published LRS adapter or exported model, generated from the folder's own files.

Metadata goes through :class:`huggingface_hub.ModelCardData` (YAML front matter, ``model-index`` from the
evaluation files); the prose is a Jinja template in ``rope_adapter.model_cards``. Every number on the card
is read from ``adapter_config.json`` / ``config.json``, ``search_report.json`` and ``results.json``, so the
card cannot disagree with the files beside it.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from rope_adapter.errors import LrsError

__all__ = ["ARXIV_URL", "CardError", "FolderInfo", "build_card", "detect_kind", "read_folder"]

ARXIV_URL = "https://arxiv.org/abs/2503.04355"
TAGS = ["rope", "lrs", "long-context", "lost-in-the-middle", "layer-specific-rope-scaling", "arxiv:2503.04355"]
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MODEL_CONFIG = "config.json"
SEARCH_REPORT = "search_report.json"
RESULTS = "results.json"
EXPORT_SIDECAR = "lrs_export.json"  # written by the exporter: factors, base model, provenance, verification

# Licenses of base models we publish for, when the base is named by Hub id and no local copy says otherwise.
KNOWN_LICENSES = {
    "HuggingFaceTB/SmolLM2-135M": "apache-2.0",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0",
    "HuggingFaceTB/SmolLM2-360M-Instruct": "apache-2.0",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": "apache-2.0",
    "google/gemma-3-270m": "gemma",
    "google/gemma-3-270m-it": "gemma",
    "Qwen/Qwen2.5-0.5B-Instruct": "apache-2.0",
    "mistralai/Mistral-7B-Instruct-v0.3": "apache-2.0",
    "microsoft/Phi-3-mini-4k-instruct": "mit",
}
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_CACHE_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/")
_BASELINE_NAMES = {"base", "baseline", "original", "none", "identity"}
_THIS_MODEL_NAMES = ("lrs", "adapter", "this", "model", "selected", "best")


class CardError(LrsError):
    """A folder that cannot be described by a card: not an LRS adapter or export, or inconsistent files."""


@dataclass
class FolderInfo:
    """What a card is made of, read from one adapter or exported-model folder."""

    kind: Literal["adapter", "model"]
    folder: Path
    factors: list[float]
    num_layers: int
    config: dict[str, Any]
    base_model: str | None = None  # as recorded: Hub id or local path
    base_model_type: str | None = None
    base_rope_parameters: dict[str, Any] | None = None
    head_dim: int | None = None
    rotary_dim: int | None = None
    provenance: dict[str, Any] | None = None
    search_report: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    custom_code: bool = False  # exported model that needs trust_remote_code
    code_files: list[str] = field(default_factory=list)
    verification: dict[str, Any] | None = None  # exported model: the exporter's check against the adapter
    factors_source: tuple[str, str] = (ADAPTER_CONFIG, "factors")  # file and key the factors are read from


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CardError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CardError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _unwrap_rope(rope: Any) -> Any:
    """The base ``rope_parameters`` inside the exporter's ``{"rope_type": "lrs", "base": ...}`` wrapping."""
    if not isinstance(rope, dict):
        return rope
    if rope.get("rope_type") == "lrs" and isinstance(rope.get("base"), dict):
        return rope["base"]
    if rope and all(isinstance(v, dict) for v in rope.values()):  # one per layer type (Gemma3 style)
        return {name: _unwrap_rope(value) for name, value in rope.items()}
    return rope


def detect_kind(folder: str | Path) -> Literal["adapter", "model"]:
    """'adapter' for an LRS PEFT adapter folder, 'model' for an exported model; CardError otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CardError(f"{folder} is not a folder")
    if (folder / ADAPTER_CONFIG).is_file():
        peft_type = _read_json(folder / ADAPTER_CONFIG).get("peft_type")
        if str(peft_type).upper() != "LRS":
            raise CardError(
                f"{folder / ADAPTER_CONFIG} is a PEFT adapter of type {peft_type!r}, not an LRS adapter "
                "(peft_type 'LRS'): publish it with PEFT's own push_to_hub"
            )
        return "adapter"
    if (folder / MODEL_CONFIG).is_file():
        if "lrs_factors" not in _read_json(folder / MODEL_CONFIG) and not (folder / EXPORT_SIDECAR).is_file():
            raise CardError(
                f"{folder / MODEL_CONFIG} has no 'lrs_factors' and there is no {EXPORT_SIDECAR}: not a model "
                "exported by rope-adapter (export it with `rope-adapter export` first)"
            )
        return "model"
    raise CardError(f"{folder} holds neither {ADAPTER_CONFIG} (an LRS adapter) nor {MODEL_CONFIG} (an exported model)")


def _check_factors(values: Any, count: int | None, where: str) -> list[float]:
    if not isinstance(values, list) or not values:
        raise CardError(f"{where}: factors must be a non-empty list of numbers, found {values!r}")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise CardError(f"{where}: every factor must be a finite number > 0, found {value!r}")
        out.append(float(value))
    if count is not None and len(out) != count:
        raise CardError(f"{where}: {len(out)} factors for {count} layers")
    return out


def _safetensors_vectors(path: Path) -> dict[str, list[float]]:
    """1-D float tensors of a safetensors file, read with the standard library."""
    formats = {"F32": ("f", 4), "F64": ("d", 8)}
    try:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(f.read(header_len))
            out = {}
            for name, meta in header.items():
                if name == "__metadata__" or len(meta.get("shape", [])) != 1 or meta.get("dtype") not in formats:
                    continue
                code, size = formats[meta["dtype"]]
                start, end = meta["data_offsets"]
                f.seek(8 + header_len + start)
                raw = f.read(end - start)
                out[name] = list(struct.unpack(f"<{len(raw) // size}{code}", raw))
            return out
    except (OSError, ValueError, KeyError, struct.error) as exc:
        raise CardError(f"{path}: not a readable safetensors file ({exc})") from None


def _check_weights(folder: Path, factors: list[float]) -> None:
    path = folder / ADAPTER_WEIGHTS
    if not path.is_file():
        raise CardError(f"{folder} has {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS}: save the adapter again")
    vectors = [v for v in _safetensors_vectors(path).values() if len(v) == len(factors)]
    if not vectors:
        raise CardError(f"{path}: no float32 tensor of shape [{len(factors)}] (one factor per layer)")
    for vector in vectors:
        if all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in zip(vector, factors, strict=True)):
            return
    raise CardError(
        f"{path} and {ADAPTER_CONFIG} disagree on the factors: the config was edited by hand or the files come "
        "from different adapters; save the adapter again"
    )


def read_folder(folder: str | Path) -> FolderInfo:
    """Read and cross-check everything a card shows; CardError says what is wrong."""
    folder = Path(folder)
    kind = detect_kind(folder)
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts)
    )
    if kind == "adapter":
        config = _read_json(folder / ADAPTER_CONFIG)
        num_layers = config.get("num_layers")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise CardError(f"{folder / ADAPTER_CONFIG}: num_layers must be a positive integer, found {num_layers!r}")
        factors = _check_factors(config.get("factors"), num_layers, str(folder / ADAPTER_CONFIG))
        _check_weights(folder, factors)
        info = FolderInfo(
            kind=kind,
            folder=folder,
            factors=factors,
            num_layers=num_layers,
            config=config,
            base_model=config.get("base_model_name_or_path"),
            base_model_type=config.get("base_model_type"),
            base_rope_parameters=config.get("base_rope_parameters"),
            head_dim=config.get("head_dim"),
            rotary_dim=config.get("rotary_dim"),
            provenance=config.get("provenance"),
        )
    else:
        config = _read_json(folder / MODEL_CONFIG)
        sidecar = _read_json(folder / EXPORT_SIDECAR) if (folder / EXPORT_SIDECAR).is_file() else {}
        where = str(folder / MODEL_CONFIG)
        text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        num_layers = config.get("num_hidden_layers") or text_config.get("num_hidden_layers")
        if "lrs_factors" in config:
            factors = _check_factors(config["lrs_factors"], num_layers, where)
            if (
                sidecar.get("factors") is not None
                and _check_factors(sidecar["factors"], None, str(folder / EXPORT_SIDECAR)) != factors
            ):
                raise CardError(
                    f"{where} and {EXPORT_SIDECAR} disagree on the factors: the folder was edited by hand; export "
                    "it again (the model uses config.json's lrs_factors)"
                )
        else:
            factors = _check_factors(sidecar.get("factors"), num_layers, str(folder / EXPORT_SIDECAR))
        num_layers = num_layers or len(factors)
        model_type = config.get("model_type")
        custom_code = "auto_map" in config
        base_type = config.get("lrs_base_model_type") or sidecar.get("base_model_type")
        if not custom_code:
            base_type = base_type or model_type
        if custom_code and model_type == base_type:
            raise CardError(
                f"{where}: model_type {model_type!r} next to an auto_map makes transformers load its built-in "
                "class WITHOUT the factors; re-export the model (its model_type must be the LRS one, e.g. "
                f"'{base_type}_lrs')"
            )
        if not custom_code and model_type != base_type:
            raise CardError(
                f"{where}: model_type {model_type!r} has no auto_map to its code, so transformers cannot load it; "
                "re-export the model"
            )
        base_rope = sidecar.get("base_rope_parameters") or config.get("lrs_base_rope_parameters")
        if base_rope is None and custom_code:
            base_rope = _unwrap_rope(config.get("rope_parameters"))
        info = FolderInfo(
            kind=kind,
            folder=folder,
            factors=factors,
            num_layers=num_layers,
            config=config,
            base_model=sidecar.get("base_model")
            or config.get("lrs_base_model_name_or_path")
            or config.get("_name_or_path")
            or None,
            base_model_type=base_type,
            base_rope_parameters=base_rope,
            head_dim=sidecar.get("head_dim") or config.get("head_dim") or text_config.get("head_dim"),
            rotary_dim=sidecar.get("rotary_dim"),
            provenance=config.get("lrs_provenance") or sidecar.get("provenance"),
            custom_code=custom_code,
            code_files=[f for f in files if f.endswith(".py")],
            verification=sidecar.get("verification") if isinstance(sidecar.get("verification"), dict) else None,
            factors_source=(MODEL_CONFIG, "lrs_factors") if "lrs_factors" in config else (EXPORT_SIDECAR, "factors"),
        )
    info.files = files
    if (folder / SEARCH_REPORT).is_file():
        info.search_report = _read_json(folder / SEARCH_REPORT)
    if (folder / RESULTS).is_file():
        info.results = _read_json(folder / RESULTS)
    return info


# base model identity and license
def _hub_id(base: str | None) -> str | None:
    """The Hub id of a base model recorded as a Hub id or as a path inside a Hub cache; else None."""
    if not base:
        return None
    match = _CACHE_SNAPSHOT.search(Path(base).as_posix())
    if match:
        return f"{match['org']}/{match['name']}"
    if Path(base).expanduser().exists() or base.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(base):
        return None
    return base


def _front_matter(readme: Path) -> dict[str, Any]:
    if not readme.is_file():
        return {}
    try:
        return ModelCard(readme.read_text(encoding="utf-8"), ignore_metadata_errors=True).data.to_dict()
    except Exception:  # an unreadable base README must not stop publishing; the license is then omitted
        return {}


def _license(info: FolderInfo, base_id: str | None) -> str | None:
    if info.base_model and Path(info.base_model).expanduser().is_dir():
        found = _front_matter(Path(info.base_model).expanduser() / "README.md").get("license")
        if found:
            return str(found)
    if info.kind == "model":
        found = _front_matter(info.folder / "README.md").get("license")
        if found:
            return str(found)
    return KNOWN_LICENSES.get(base_id or "")


# evaluation files
def _variants(data: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Variant name -> {"per_position": {pos: mean}, "mean": m, "stderr": s} from a report or results file,
    and the object that holds them (it may name the metric)."""
    for holder in (data.get("heldout"), data):
        if isinstance(holder, dict) and isinstance(holder.get("variants"), dict):
            return {str(k): v for k, v in holder["variants"].items() if isinstance(v, dict)}, holder
    if isinstance(data.get("per_position"), dict):
        return {"this model": data}, data
    return {}, data


def _baseline_names(report: dict[str, Any]) -> set[str]:
    names = set(_BASELINE_NAMES)
    baselines = report.get("baselines")
    if isinstance(baselines, dict):
        names.update(str(k) for k in baselines)
    elif isinstance(baselines, list):
        names.update(str(b.get("name") if isinstance(b, dict) else b) for b in baselines)
    return names


def _this_model(variants: dict[str, dict[str, Any]], baselines: set[str]) -> str | None:
    """The variant that is the published adapter: the only non-baseline one, or one named like it."""
    if "this model" in variants:
        return "this model"
    candidates = [name for name in variants if name.lower() not in {b.lower() for b in baselines}]
    if len(candidates) == 1:
        return candidates[0]
    for name in _THIS_MODEL_NAMES:
        if name in variants:
            return name
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _fmt(value: Any, digits: int = 4) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def _position_key(pos: Any) -> tuple[int, float | str]:
    try:
        return (0, float(pos))
    except (TypeError, ValueError):
        return (1, str(pos))


@dataclass
class _ResultTable:
    title: str
    source: str
    split: str
    metric: str
    positions: list[str]
    rows: list[dict[str, Any]]
    this_model: str | None
    plots: list[tuple[str, str]]
    notes: list[str]


def _result_table(
    data: dict[str, Any], source: str, split: str, task: dict[str, Any], files: list[str]
) -> _ResultTable:
    variants, holder = _variants(data)
    baselines = _baseline_names(data)
    this = _this_model(variants, baselines)
    positions = sorted({str(p) for v in variants.values() for p in (v.get("per_position") or {})}, key=_position_key)
    rows = []
    for name, variant in variants.items():
        per_position = {str(k): _number(v) for k, v in (variant.get("per_position") or {}).items()}
        raw = [per_position.get(p) for p in positions]
        rows.append(
            {
                "name": name,
                "this": name == this,
                "raw": raw,
                "values": [_fmt(v) for v in raw],
                "mean_raw": _number(variant.get("mean")),
                "mean": _fmt(variant.get("mean")),
                "stderr": _fmt(variant.get("stderr")),
            }
        )
    metric = str(holder.get("metric") or data.get("metric") or task.get("score") or "score")
    plots = [(name, alt) for name, alt in (("positions.png", "Score by gold position"),) if name in files]
    if source == SEARCH_REPORT:
        plots = [(n, a) for n, a in (("pareto.png", "Pareto front of the search"),) if n in files]
    title = "Held-out evaluation (search report)" if source == SEARCH_REPORT else "Evaluation"
    notes = []
    front = data.get("pareto_front")
    if source == SEARCH_REPORT and isinstance(front, list):
        notes.append(f"The search's Pareto front holds {len(front)} trial{'s' if len(front) != 1 else ''}.")
    return _ResultTable(title, source, split, metric, positions, rows, this, plots, notes)


def _eval_results(table: _ResultTable, task: dict[str, Any]) -> list[EvalResult]:
    if table.this_model is None:
        return []
    row = next(r for r in table.rows if r["this"])
    task_name = str(task.get("name") or "kv-retrieval")
    pairs = task.get("pairs")
    dataset_name = f"Lost in the Middle {task_name}" + (f" ({pairs} pairs)" if pairs else "")
    common = {
        "task_type": "text-generation",
        "dataset_type": "lost-in-the-middle",
        "dataset_name": dataset_name,
        "dataset_config": task_name,
        "dataset_split": table.split,
    }
    out = []
    if row["mean_raw"] is not None:
        out.append(
            EvalResult(
                metric_type=table.metric,
                metric_name=f"{table.metric} (mean over gold positions)",
                metric_value=row["mean_raw"],
                **common,
            )
        )
    for pos, value in zip(table.positions, row["raw"], strict=True):
        if value is not None:
            out.append(
                EvalResult(
                    metric_type=f"{table.metric}@position_{pos}",
                    metric_name=f"{table.metric} at gold position {pos}",
                    metric_value=value,
                    **common,
                )
            )
    return out


def _template(kind: str) -> str:
    name = "adapter.md.j2" if kind == "adapter" else "model.md.j2"
    return resources.files("rope_adapter.model_cards").joinpath(name).read_text(encoding="utf-8")


def build_card(folder: str | Path, *, repo_id: str | None = None) -> ModelCard:
    """The model card (README.md) of an LRS adapter or exported-model folder.

    ``repo_id`` is where it will be published (used in the loading code); without it the code loads from
    the local folder. Raises CardError for a folder that is not an LRS adapter or export, or whose files
    disagree.
    """
    info = read_folder(folder)
    base_id = _hub_id(info.base_model)
    location = repo_id or info.folder.as_posix()
    model_name = (repo_id or info.folder.resolve().name).split("/")[-1]
    provenance = info.provenance if isinstance(info.provenance, dict) else None
    task = provenance.get("task") if provenance and isinstance(provenance.get("task"), dict) else {}
    tables = []
    if info.search_report is not None:
        tables.append(_result_table(info.search_report, SEARCH_REPORT, "heldout", task, info.files))
    if info.results is not None:
        split = str(info.results.get("split") or "test")
        tables.append(_result_table(info.results, RESULTS, split, task, info.files))
    tables = [t for t in tables if t.rows or t.plots]
    eval_results = [r for t in tables for r in _eval_results(t, task)]

    tags = list(TAGS)
    if info.base_model_type:
        tags.append(str(info.base_model_type))
    if info.custom_code:
        tags.append("custom_code")
    extra: dict[str, Any] = {}
    if info.kind == "adapter" and base_id:
        extra["base_model_relation"] = "adapter"
    card_data = ModelCardData(
        base_model=base_id,
        library_name="peft" if info.kind == "adapter" else "transformers",
        pipeline_tag="text-generation",
        tags=tags,
        license=_license(info, base_id),
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
        **extra,
    )
    uniform = len(set(info.factors)) == 1
    control_points = []
    curve = provenance.get("curve") if provenance and isinstance(provenance.get("curve"), dict) else {}
    for point in curve.get("control_points") or []:
        if isinstance(point, list | tuple) and len(point) == 2:
            control_points.append((_fmt(point[0]), _fmt(point[1])))
    scalar = (str, int, float, bool)
    context = {
        "repo_id": location,
        "model_name": model_name,
        "kind": info.kind,
        "paper_url": ARXIV_URL,
        "base_model": info.base_model,
        "base_model_id": base_id,
        "base_expr": json.dumps(base_id or info.base_model) if (base_id or info.base_model) else "BASE_MODEL",
        "base_model_type": info.base_model_type,
        "base_rope_parameters": json.dumps(info.base_rope_parameters, sort_keys=True)
        if info.base_rope_parameters
        else None,
        "rope_parameters": json.dumps(info.config.get("rope_parameters"), sort_keys=True)
        if info.config.get("rope_parameters")
        else None,
        "model_type": info.config.get("model_type"),
        "num_layers": info.num_layers,
        "head_dim": info.head_dim,
        "rotary_dim": info.rotary_dim,
        "factor_rows": [(i, _fmt(f)) for i, f in enumerate(info.factors)],
        "factor_min": _fmt(min(info.factors)),
        "factor_max": _fmt(max(info.factors)),
        "factor_mean": _fmt(sum(info.factors) / len(info.factors)),
        "uniform": uniform,
        "has_factors_png": "factors.png" in info.files,
        "tables": tables,
        "provenance": provenance,
        "method": provenance.get("method") if provenance else None,
        "curve": {k: v for k, v in curve.items() if k != "control_points" and isinstance(v, scalar)},
        "control_points": control_points,
        "study": {k: v for k, v in (provenance.get("study") or {}).items() if isinstance(v, scalar)}
        if provenance
        else {},
        "task": {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in task.items()},
        "scores": {k: (_fmt(v) if _number(v) is not None else v) for k, v in (provenance.get("scores") or {}).items()}
        if provenance and isinstance(provenance.get("scores"), dict)
        else {},
        "license": card_data.license,
        "factors_file": info.factors_source[0],
        "factors_key": info.factors_source[1],
        "verification": {k: v for k, v in (info.verification or {}).items() if isinstance(v, scalar)},
        "custom_code": info.custom_code,
        "code_files": info.code_files,
        "files": [f for f in info.files if f != "README.md"],
    }
    return ModelCard.from_template(card_data, template_str=_template(info.kind), **context)
