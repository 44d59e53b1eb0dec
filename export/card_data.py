"""What a model card is made of, read and checked from one adapter or exported-model folder.

Reading goes through the core's readers: :func:`rope_adapter.read_adapter_factors` for an adapter (config and
safetensors checked against each other) and :func:`rope_adapter.export.reading.read_exported_factors` for an export.
Results come only as the writers' record, :class:`~rope_adapter.scoring.results_table.ResultsTable`: from
``results_table.json`` (the search writes it into ``OUT/adapter``, ``eval`` into its folder) and from the record
an ``eval`` ``results.json`` placed in the folder carries (no other key of that file is read).
:func:`public_base_model` and :func:`public_json` keep local paths out of what is published.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from rope_adapter import read_adapter_factors
from rope_adapter.embedded.loading import embedded_hub_id
from rope_adapter.errors import LrsError, RecordFileError
from rope_adapter.export.reading import SIDECAR_NAME, read_exported_factors
from rope_adapter.export.sidecar import Verification
from rope_adapter.export.staging import ExportError
from rope_adapter.json_types import JsonObject
from rope_adapter.provenance import Provenance
from rope_adapter.records import check_record, read_json
from rope_adapter.rope_settings import RopeSettings
from rope_adapter.scoring.results_table import RECORD_KEY, RESULTS_TABLE_NAME, ResultsTable, ResultsTableError

__all__ = [
    "CardError",
    "FolderInfo",
    "detect_kind",
    "public_base_model",
    "public_json",
    "public_text",
    "read_folder",
]

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIG = "config.json"
RESULTS = "results.json"
LOCAL_MARK = "<local>"
"""Stands for the folders above a local path's last part in what is published."""

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_CACHE_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/")
_FILE_URL = re.compile(r"(?P<scheme>sqlite|file):///+(?P<path>[^\s\"']+)")
_ABS_PATH = re.compile(r"(?<![\w/.~<>-])(?:~/|/)(?!\.\.?(?:/|$|[\s\"']))(?:[^\s/\"',;:=]+/)*[^\s/\"',;:=]+")
"""An absolute local path (``/x/y``, ``~/x``); ``/../..`` after a shell expression is relative, not a path of ours."""
_NAME_KEYS = {"base_model_name_or_path", "base_model", "_name_or_path", "lrs_base_model_name_or_path"}


class CardError(LrsError):
    """A folder that cannot be described by a card: not an LRS adapter or export, or inconsistent files."""


@dataclass
class FolderInfo:
    """What a card is made of, read from one adapter or exported-model folder."""

    kind: Literal["adapter", "model"]
    folder: Path
    factors: list[float]
    num_layers: int
    config: JsonObject  # adapter_config.json or config.json as the folder holds it
    base_model: str | None = None  # as recorded: Hub id or local path (see public_base_model)
    base_model_type: str | None = None
    base_rope_parameters: RopeSettings | None = None
    head_dim: int | None = None
    rotary_dim: int | None = None
    provenance: Provenance | None = None  # as a search wrote it (rope_adapter.provenance), or the user's own
    tables: list[tuple[str, ResultsTable]] = field(default_factory=list)  # (file it came from, table)
    files: list[str] = field(default_factory=list)  # what push uploads (publishable_names), README.md aside
    left_out: list[str] = field(default_factory=list)  # "NAME (why)" for everything else in the folder
    custom_code: bool = False  # exported model that needs trust_remote_code
    code_files: list[str] = field(default_factory=list)
    verification: Verification | None = None  # exported model: the exporter's check against the adapter
    factors_source: tuple[str, str] = (ADAPTER_CONFIG, "factors")  # file and key the factors are read from


def _read_json(path: Path) -> JsonObject:
    try:
        return read_json(path, JsonObject)
    except RecordFileError as exc:
        raise CardError(str(exc)) from None


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
        if "lrs_factors" not in _read_json(folder / MODEL_CONFIG) and not (folder / SIDECAR_NAME).is_file():
            raise CardError(
                f"{folder / MODEL_CONFIG} has no 'lrs_factors' and there is no {SIDECAR_NAME}: not a model "
                "exported by rope-adapter (export it with `rope-adapter export` first)"
            )
        return "model"
    raise CardError(f"{folder} holds neither {ADAPTER_CONFIG} (an LRS adapter) nor {MODEL_CONFIG} (an exported model)")


def _read_adapter(folder: Path) -> FolderInfo:
    try:
        config, _ = read_adapter_factors(folder)
    except LrsError as exc:
        raise CardError(str(exc)) from None
    factors = [float(f) for f in config.factors]
    return FolderInfo(
        kind="adapter",
        folder=folder,
        factors=factors,
        num_layers=int(config.num_layers),
        config=_read_json(folder / ADAPTER_CONFIG),
        base_model=config.base_model_name_or_path,
        base_model_type=config.base_model_type,
        base_rope_parameters=config.base_rope_parameters,
        head_dim=config.head_dim,
        rotary_dim=config.rotary_dim,
        provenance=_as_provenance(config.provenance, folder / ADAPTER_CONFIG),
    )


def _as_provenance(value: Any, where: Path) -> Provenance | None:
    """Provenance as recorded (a JSON object the core checked), checked against its one definition: a key it
    names holds the type it says (a score may be null: the search stores a non-finite number so), or a
    :class:`~rope_adapter.errors.RecordFileError` names the file and the field."""
    if not isinstance(value, dict):
        return None
    check_record(value, Provenance, where, "provenance", null_numbers=True)
    return cast(Provenance, value)


def _read_export(folder: Path, files: list[str]) -> FolderInfo:
    try:
        exported = read_exported_factors(folder)
    except ExportError as exc:
        raise CardError(str(exc)) from None
    config = _read_json(folder / MODEL_CONFIG)
    sidecar = _read_json(folder / SIDECAR_NAME) if (folder / SIDECAR_NAME).is_file() else {}
    where = str(folder / MODEL_CONFIG)
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    num_layers = config.get("num_hidden_layers") or text_config.get("num_hidden_layers")
    factors = [float(f) for f in exported["factors"]]
    if num_layers is not None and len(factors) != num_layers:
        raise CardError(f"{where}: {len(factors)} factors for {num_layers} layers")
    model_type = config.get("model_type")
    custom_code = "auto_map" in config
    base_type = exported["base_model_type"] or (None if custom_code else model_type)
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
    verification = exported.get("verification")
    return FolderInfo(
        kind="model",
        folder=folder,
        factors=factors,
        num_layers=num_layers or len(factors),
        config=config,
        base_model=exported["base_model"] or config.get("_name_or_path") or None,
        base_model_type=base_type,
        base_rope_parameters=exported["base_rope_parameters"],
        head_dim=exported["head_dim"] or text_config.get("head_dim"),
        rotary_dim=sidecar.get("rotary_dim"),
        provenance=_as_provenance(exported["provenance"], folder / MODEL_CONFIG),
        custom_code=custom_code,
        code_files=[f for f in files if f.endswith(".py")],
        verification=verification if isinstance(verification, dict) else None,
        factors_source=(MODEL_CONFIG, "lrs_factors") if "lrs_factors" in config else (SIDECAR_NAME, "factors"),
    )


def read_tables(folder: Path) -> list[tuple[str, ResultsTable]]:
    """The results records of a folder: ``results_table.json``, then the one an ``eval`` ``results.json`` carries
    (under ``RECORD_KEY``: the card reads no other key of it)."""
    tables = []
    if (folder / RESULTS_TABLE_NAME).is_file():
        try:
            tables.append((RESULTS_TABLE_NAME, ResultsTable.read(folder)))
        except ResultsTableError as exc:
            raise CardError(str(exc)) from None
    if (folder / RESULTS).is_file():
        data = _read_json(folder / RESULTS)
        try:
            table = ResultsTable.embedded_in(data)
        except ResultsTableError as exc:
            raise CardError(f"{folder / RESULTS}: {exc}") from None
        if table is None and data.get("kind") == "positions":
            raise CardError(
                f"{folder / RESULTS}: a position sweep without its results record ({RECORD_KEY!r}): written by an "
                "older rope-adapter; rerun `rope-adapter eval` and copy its results.json again"
            )
        if table is not None and all(t.to_dict() != table.to_dict() for _, t in tables):  # eval's own beside it
            tables.append((RESULTS, table))
    return tables


COMMON_FILES = frozenset({"README.md", "results.json", "results_table.json", "factors.png", "positions.png"})
"""Files either kind of folder may publish beside its own: the card, the results it shows and their figures."""
ADAPTER_FILES = frozenset({"adapter_config.json", "adapter_model.safetensors"})
MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "added_tokens.json",
        "chat_template.jinja",
        "chat_template.json",
    }
)
"""An exported model's own files, besides its weights (``*.safetensors``), sidecar and the code its auto_map names."""


def _auto_map_modules(folder: Path) -> set[str]:
    """The ``*.py`` files an exported config's ``auto_map`` names (``"modeling_x.Class"`` -> ``modeling_x.py``)."""
    try:
        auto_map = read_json(folder / MODEL_CONFIG).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return set()
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, list) else [v]) if isinstance(r, str)]
    return {r.split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs if "." in r}


def publishable_names(folder: Path, kind: str) -> tuple[list[str], list[str]]:
    """``(files, left_out)``: the regular, top-level files an adapter (``kind="adapter"``) or exported model needs,
    and ``"NAME (why)"`` for everything else. Links are never followed (a link is left out, whatever it points at),
    subfolders are not entered (an ``exported/`` model inside an adapter folder stays local), and anything else
    (a search report with worker names and a storage path, notes, a study file) is left out."""
    allowed = COMMON_FILES | (ADAPTER_FILES if kind == "adapter" else MODEL_FILES | {SIDECAR_NAME})
    code = _auto_map_modules(folder) if kind == "model" else set()
    files, left_out = [], []
    for path in sorted(folder.iterdir()):
        name = path.name
        if path.is_symlink():
            left_out.append(f"{name} (a link: never followed)")
        elif path.is_dir():
            if name != "__pycache__" and not name.startswith("."):
                left_out.append(f"{name}/ (a folder: not part of the {kind})")
        elif not path.is_file() or name.startswith(".") or name.endswith(".pyc"):
            continue
        elif name in allowed or name in code or (kind == "model" and name.endswith(".safetensors")):
            files.append(name)
        else:
            left_out.append(f"{name} (not a file an LRS {kind} needs)")
    return files, left_out


def read_folder(folder: str | Path) -> FolderInfo:
    """Read and cross-check everything a card shows; CardError says what is wrong."""
    folder = Path(folder)
    kind = detect_kind(folder)
    files, left_out = publishable_names(folder, kind)
    needed = sorted(ADAPTER_FILES) if kind == "adapter" else [MODEL_CONFIG]
    missing = [n for n in needed if n not in files]
    if missing:
        raise CardError(
            f"{folder}: {', '.join(missing)} must be a regular file in the folder (links are never followed): "
            "copy the file in place of the link"
        )
    info = _read_adapter(folder) if kind == "adapter" else _read_export(folder, files)
    info.files = files
    info.left_out = left_out
    info.tables = read_tables(folder)
    return info


# ---------------------------------------------------------------------------------------------------- publishing


def _looks_local(name: str) -> bool:
    return name.startswith(("/", ".", "~", "\\")) or bool(re.match(r"[A-Za-z]:[\\/]", name)) or name.count("/") > 1


def public_base_model(name: str | None) -> str | None:
    """The Hub id of a recorded base model, or None when it names no model anyone else can fetch.

    A Hub id stays; an embedded model (alias, Hub id or converted folder) gives its Hub id; a path inside a Hub
    cache gives the cached repo's id; a local folder gives the Hub id its ``config.json`` names as
    ``_name_or_path``, if any. Anything else is local: None.
    """
    if not name:
        return None
    name = str(name)
    hub_id = embedded_hub_id(name)
    if hub_id is not None:
        return hub_id
    match = _CACHE_SNAPSHOT.search(Path(name).as_posix())
    if match:
        return f"{match['org']}/{match['name']}"
    path = Path(name).expanduser()
    if path.is_dir():
        try:
            recorded = read_json(path / MODEL_CONFIG).get("_name_or_path")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, str) and recorded != name and not Path(recorded).expanduser().exists():
            return public_base_model(recorded) if not _looks_local(recorded) else None
        return None
    if _looks_local(name) or not _HUB_ID.fullmatch(name):
        return None
    return name


def _public_path(path: str) -> str:
    hub_id = embedded_hub_id(path)
    if hub_id is not None:
        return hub_id
    match = _CACHE_SNAPSHOT.search(path)
    if match:
        return f"{match['org']}/{match['name']}"
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return f"{LOCAL_MARK}/{last}" if last and last != "~" else LOCAL_MARK


def public_text(text: str) -> str:
    """``text`` with every absolute local path replaced: an SQLite URL keeps its file name
    (``sqlite:///study.db``), a model folder becomes its Hub id when known, other paths ``<local>/name``."""
    text = _FILE_URL.sub(lambda m: f"{m['scheme']}:///{Path(m['path']).name}", text)
    return _ABS_PATH.sub(lambda m: _public_path(m.group(0)), text)


def public_json(value: Any, key: str | None = None) -> Any:
    """A copy of a JSON value without local paths: base-model names become their Hub id (or None when local),
    every other string goes through :func:`public_text`."""
    if isinstance(value, dict):
        return {k: public_json(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [public_json(v) for v in value]
    if isinstance(value, str):
        if key in _NAME_KEYS:
            return public_base_model(value)
        return public_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
