"""Model cards for a published LRS adapter or exported model, rendered from the folder's own files.

:mod:`rope_adapter.export.card_data` reads and checks the folder (factors through the core's readers, results as
:class:`~rope_adapter.scoring.results_table.ResultsTable`); this module only renders. Metadata goes through
:class:`huggingface_hub.ModelCardData` (YAML front matter, ``model-index`` with the results of the variant whose
factors are this folder's); the prose is a Jinja template in ``rope_adapter.model_cards``. Every number on the
card is read from the folder's files, and no local path reaches the card.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import ModelCard, ModelCardData

from rope_adapter.files import dumps_json
from rope_adapter.provenance import Provenance
from rope_adapter.scoring.results_table import RESULTS_TABLE_NAME
from rope_adapter.scoring.tasks import display_name

from .card_data import (
    CardError,
    FolderInfo,
    detect_kind,
    public_base_model,
    public_json,
    public_text,
    read_folder,
)
from .card_results import eval_results, fmt_value, readable, table_context

__all__ = ["ARXIV_URL", "CardError", "FolderInfo", "build_card", "detect_kind", "read_folder", "render_card"]

ARXIV_URL = "https://arxiv.org/abs/2503.04355"
TAGS = ["rope", "lrs", "long-context", "lost-in-the-middle", "layer-specific-rope-scaling", "arxiv:2503.04355"]

# Licenses of base models we publish for, when the base is named by Hub id and no local copy says otherwise.
KNOWN_LICENSES = {
    "HuggingFaceTB/SmolLM2-135M": "apache-2.0",
    "HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0",
    "HuggingFaceTB/SmolLM2-360M-Instruct": "apache-2.0",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": "apache-2.0",
    "google/gemma-3-270m": "gemma",
    "google/gemma-3-270m-it": "gemma",
    "Qwen/Qwen2.5-0.5B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": "apache-2.0",
    "mistralai/Mistral-7B-Instruct-v0.3": "apache-2.0",
    "microsoft/Phi-3-mini-4k-instruct": "mit",
}
METHODS = {
    "bezier-nsga2": "Bézier curve of the layer index, searched with NSGA-II (Optuna)",
    "bezier-gp": "Bézier curve of the layer index, searched with a constrained Gaussian-process sampler (Optuna)",
    "bezier-tpe": "Bézier curve of the layer index, searched with multivariate TPE (Optuna)",
}


# ---------------------------------------------------------------------------------------------------- provenance


def _provenance_lines(provenance: Provenance, with_holdout: bool = True) -> list[str]:
    """'How the factors were found' as readable lines (no dict reprs, no local paths); ``with_holdout=False``
    leaves out the held-out scores a results table already shows."""
    lines = []
    method = provenance.get("method")
    if method:
        lines.append(f"Method: {METHODS.get(method, method)} (`{method}`)")
    curve = provenance.get("curve") or {}  # checked against its record (card_data): an object where present
    if curve:
        parts = []
        if curve.get("degree") is not None:
            parts.append(f"degree {curve['degree']}")
        if curve.get("x_mode"):
            parts.append(f"{curve['x_mode']} control-point depths")
        if curve.get("s_min") is not None and curve.get("s_max") is not None:
            parts.append(f"factors searched in [{readable(curve['s_min'])}, {readable(curve['s_max'])}]")
        rest = {k: v for k, v in curve.items() if k not in {"degree", "x_mode", "s_min", "s_max", "control_points"}}
        lines.append("Curve: " + ", ".join(parts + [f"{k.replace('_', ' ')} {readable(v)}" for k, v in rest.items()]))
    study = provenance.get("study") or {}
    if study:
        parts = [
            f"`{study['name']}`" if study.get("name") else "",
            f"trial {study['trial']}" if "trial" in study else "",
        ]
        parts += [f"{k.replace('_', ' ')} {readable(v)}" for k, v in study.items() if k not in {"name", "trial"}]
        lines.append("Optuna study: " + ", ".join(p for p in parts if p))
    task = provenance.get("task") or {}
    labels = task.get("position_labels") or {}  # several record lengths: position key -> "pairs:position"
    if task:
        name = task.get("name")
        parts = [display_name(str(name)) if name else ""]
        if task.get("pairs"):
            several = " (one study over these record lengths)" if isinstance(task["pairs"], list) else ""
            parts.append(f"{readable(task['pairs'])} key-value pairs{several}")
        if task.get("positions"):
            shown_positions = [labels.get(str(p), p) for p in task["positions"]]
            parts.append(f"gold positions {'(pairs:position) ' if labels else ''}{readable(shown_positions)}")
        if task.get("search_records") is not None:
            parts.append(f"{task['search_records']} search / {task.get('holdout_records', 0)} held-out records")
        shown = {"name", "pairs", "positions", "position_labels", "search_records", "holdout_records"}
        parts += [
            f"{k.replace('_', ' ')} {readable(v)}" for k, v in task.items() if k not in shown and v not in ({}, None)
        ]
        lines.append("Task: " + ", ".join(p for p in parts if p))
    scores = provenance.get("scores") or {}
    order = ("objectives", "search", "confirmation", "holdout")  # the adapter's config stores its keys sorted
    for key, value in sorted(scores.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)):
        if key == "objectives":
            lines.append(f"Objectives (maximised): {readable(value)}")
        elif key in ("search", "confirmation", "holdout") and isinstance(value, dict):
            if key == "holdout" and not with_holdout:
                continue  # the held-out results table shows these numbers and the verdict
            lines += _score_lines(key, value, labels)
        else:
            lines.append(f"Score {str(key).replace('_', ' ')}: {readable(value)}")
    return lines


def _score_lines(key: str, value: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The lines of one set of scores (``search``, ``confirmation`` or ``holdout``); ``labels``: how the positions
    of a study over several record lengths are shown."""
    where = {"search": "the search records", "holdout": "the held-out records"}.get(key, "")
    note = ""
    if key == "confirmation":
        where = f"the {value['records']} confirmation records" if value.get("records") else "the confirmation records"
        alone = value.get("search_found")
        note = ", on which the curve was chosen" + (
            f" (the search records alone chose trial {alone})" if alone is not None else ""
        )
    parts = [f"{k} {readable(v)}" for k, v in value.items() if k in ("mean", "worst", "fitness")]
    by_position = value.get("by_position")
    if isinstance(by_position, dict):
        cells = ", ".join(f"{labels.get(p, p)}: {readable(v)}" for p, v in by_position.items())
        parts.append(f"by gold position {'(pairs:position) ' if labels else ''}{cells}")
    lines = [f"Score on {where}{note}: " + ", ".join(parts)]
    if isinstance(value.get("by_length"), dict):
        at = [
            f"{n} pairs: {', '.join(f'{k} {readable(v)}' for k, v in m.items())}" for n, m in value["by_length"].items()
        ]
        lines.append(f"Score on {where} by record length: " + "; ".join(at))
    for extra in ("warning", "verdict"):
        if value.get(extra):
            lines.append(f"{extra.capitalize()}: {public_text(str(value[extra]))}")
    return lines


# ---------------------------------------------------------------------------------------------------- the card


def _readme_license(readme: Path) -> str | None:
    """The license a model's README.md names in its front matter (None: none, or no readable README)."""
    if not readme.is_file():
        return None
    try:
        found = ModelCard(readme.read_text(encoding="utf-8"), ignore_metadata_errors=True).data.to_dict().get("license")
    except Exception:  # an unreadable base README must not stop publishing; the license is then omitted
        return None
    return str(found) if found else None


def _license(info: FolderInfo, base_id: str | None) -> str | None:
    if info.base_model and Path(info.base_model).expanduser().is_dir():
        found = _readme_license(Path(info.base_model).expanduser() / "README.md")
        if found:
            return found
    if info.kind == "model":
        found = _readme_license(info.folder / "README.md")
        if found:
            return found
    return KNOWN_LICENSES.get(base_id or "")


def _load_template(name: str) -> str:
    return resources.files("rope_adapter.model_cards").joinpath(name).read_text(encoding="utf-8")


def render_card(info: FolderInfo, *, repo_id: str | None = None) -> ModelCard:
    """The card of a folder already read by :func:`read_folder` (see :func:`build_card`)."""
    base_id = public_base_model(info.base_model)
    location = repo_id or info.folder.resolve().name
    model_name = location.split("/")[-1]
    provenance = public_json(info.provenance) if isinstance(info.provenance, dict) else None
    tables, index_entries = [], []
    for source, table in info.tables:
        found = table.variant_with_factors(info.factors)
        this = found.name if found else None
        tables.append(table_context(source, table, this, info.kind))
        index_entries += eval_results(table, this)

    tags = list(TAGS)
    if info.base_model_type:
        tags.append(str(info.base_model_type))
    if info.custom_code:
        tags.append("custom_code")
    extra: dict[str, str] = {"base_model_relation": "adapter"} if info.kind == "adapter" and base_id else {}
    card_data = ModelCardData(
        base_model=base_id,
        library_name="peft" if info.kind == "adapter" else "transformers",
        pipeline_tag="text-generation",
        tags=tags,
        license=_license(info, base_id),
        model_name=model_name if index_entries else None,
        eval_results=index_entries or None,
        **extra,
    )
    control_points = []
    curve = (provenance or {}).get("curve") or {}
    for point in curve.get("control_points") or []:
        if isinstance(point, list | tuple) and len(point) == 2:
            control_points.append((fmt_value(point[0]), fmt_value(point[1])))
    scalar = (str, int, float, bool)
    rope = info.config.get("rope_parameters")
    context = {
        "repo_id": location,
        "model_name": model_name,
        "kind": info.kind,
        "paper_url": ARXIV_URL,
        "base_model_id": base_id,
        "base_is_local": bool(info.base_model) and base_id is None,
        "base_expr": dumps_json(base_id, where="the card's base model") if base_id else "BASE_MODEL",
        "base_model_type": info.base_model_type,
        "base_rope_parameters": dumps_json(info.base_rope_parameters, where="base_rope_parameters", sort_keys=True)
        if info.base_rope_parameters
        else None,
        "rope_parameters": dumps_json(rope, where="rope_parameters", sort_keys=True) if rope else None,
        "model_type": info.config.get("model_type"),
        "num_layers": info.num_layers,
        "head_dim": info.head_dim,
        "rotary_dim": info.rotary_dim,
        "factor_rows": [(i, fmt_value(f)) for i, f in enumerate(info.factors)],
        "factor_min": fmt_value(min(info.factors)),
        "factor_max": fmt_value(max(info.factors)),
        "factor_mean": fmt_value(sum(info.factors) / len(info.factors)),
        "uniform": len(set(info.factors)) == 1,
        "has_factors_png": "factors.png" in info.files,
        "has_positions_png": "positions.png" in info.files,
        "tables": tables,
        "provenance_lines": _provenance_lines(provenance, not any(t.source == "search-holdout" for _, t in info.tables))
        if provenance
        else [],
        "method": (provenance or {}).get("method"),
        "control_points": control_points,
        "license": card_data.license,
        "factors_file": info.factors_source[0],
        "factors_key": info.factors_source[1],
        "verification": {k: public_text(str(v)) for k, v in (info.verification or {}).items() if isinstance(v, scalar)},
        "custom_code": info.custom_code,
        "code_files": info.code_files,
        "files": [f for f in info.files if f != "README.md"],
        "results_table_name": RESULTS_TABLE_NAME,
    }
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load_template), autoescape=False)
    template = env.get_template("adapter.md.j2" if info.kind == "adapter" else "model.md.j2")
    return ModelCard(template.render(card_data=card_data.to_yaml(), **context))


def build_card(folder: str | Path, *, repo_id: str | None = None) -> ModelCard:
    """The model card (README.md) of an LRS adapter or exported-model folder.

    ``repo_id`` is where it will be published (used in the loading code); without it the code names the
    folder. Raises CardError for a folder that is not an LRS adapter or export, or whose files disagree.
    """
    return render_card(read_folder(folder), repo_id=repo_id)
