"""Model variants compared by ``rope-adapter eval``: the base, uniform factors, LRS adapters, RoPE types, mixes.

A variant is written as a short spec; several are separated by commas::

    base                      the model as loaded
    uniform:1.1               an LRS adapter with the same factor on every layer (= linear scaling by 1.1)
    adapter:PATH              an LRS adapter folder or Hub repo id, loaded with PeftModel.from_pretrained
    linear:2                  transformers' linear RoPE scaling (position interpolation, PI) with factor 2
    dynamic:2                 transformers' dynamic NTK scaling with factor 2
    yarn:4                    transformers' YaRN with factor 4
    linear:2+adapter:PATH     PI and an LRS adapter together (the adapter divides PI's frequencies by s_l)
    found=adapter:out/best    any spec can carry a label before ``=``, used in tables and plots

Parsing checks the syntax only (:func:`parse_variants`); :func:`check_variants` then reads the adapters and the
model's config (not its weights) and refuses what cannot work, so that every mistake surfaces before the model
is loaded.

Combining a RoPE type with an adapter: an adapter records the RoPE settings of the model it was made for
(``base_rope_parameters``) and PEFT refuses it on a model with other settings. An adapter made on the plain
model is combined with a RoPE type by building an ``LrsConfig`` from its factors for the variant model, so the
factors keep their meaning "divide this model's current ``inv_freq`` by s_l" (semantics A of the core). An adapter
that was itself made on the variant's RoPE settings is loaded as it is. Anything else is an
``AdapterMismatchError``.

Variants are built as shallow copies of the loaded model that share its weights (:func:`build_variant`), so the
base model is never modified and a variant costs no extra parameter memory.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
from peft import PeftModel, get_peft_model
from torch import nn

from rope_adapter import AdapterMismatchError, LrsConfig, find_rope_site, get_factors, read_adapter_factors
from rope_adapter.errors import LrsError
from rope_adapter.factors import FACTOR_MAX, FACTOR_MIN
from rope_adapter.numbers import as_real, parse_number
from rope_adapter.rope_settings import RopeSettings, copy_rope_settings, rope_signature, rotaries

ROPE_TYPES = ("linear", "dynamic", "yarn")
"""RoPE types a variant can set, by their transformers names (``ROPE_INIT_FUNCTIONS`` keys)."""

VARIANT_KINDS = ("base", "uniform", "adapter", *ROPE_TYPES)


class VariantSpec(TypedDict):
    """A variant as results.json lists it (:meth:`Variant.to_dict`)."""

    name: str
    spec: str
    rope_type: str | None
    rope_factor: float | None
    uniform: float | None
    adapter: str | None


class BuiltVariant(TypedDict):
    """What a built variant's model has (:func:`describe_variant`): its RoPE settings and LRS factors."""

    rope_parameters: RopeSettings
    factors: list[float] | None


class VariantError(LrsError):
    """A variant spec that cannot be parsed or cannot be applied to the model."""


@dataclass(frozen=True)
class Variant:
    """One model variant: an optional RoPE type and an optional LRS adapter (uniform factor or adapter folder)."""

    name: str = field(metadata={"help": "Label in tables and plots (the spec unless given as NAME=SPEC)."})
    rope_type: str | None = field(default=None, metadata={"help": "linear, dynamic or yarn; None keeps the model's."})
    rope_factor: float | None = field(default=None, metadata={"help": "Factor of rope_type."})
    uniform: float | None = field(default=None, metadata={"help": "Same LRS factor on every layer."})
    adapter: str | None = field(default=None, metadata={"help": "LRS adapter folder or Hub repo id."})

    def __post_init__(self) -> None:
        for name in ("rope_factor", "uniform"):  # any number type, kept as a float; VariantError naming it otherwise
            object.__setattr__(self, name, as_real(getattr(self, name), name, error=VariantError, optional=True))

    @property
    def spec(self) -> str:
        """The canonical spec string (without the label)."""
        parts = []
        if self.rope_type is not None:
            parts.append(f"{self.rope_type}:{_fmt(self.rope_factor)}")
        if self.uniform is not None:
            parts.append(f"uniform:{_fmt(self.uniform)}")
        if self.adapter is not None:
            parts.append(f"adapter:{self.adapter}")
        return "+".join(parts) or "base"

    @property
    def is_base(self) -> bool:
        """True for the model as loaded (no RoPE change, no adapter)."""
        return self.rope_type is None and self.uniform is None and self.adapter is None

    def to_dict(self) -> VariantSpec:
        return {
            "name": self.name,
            "spec": self.spec,
            "rope_type": self.rope_type,
            "rope_factor": self.rope_factor,
            "uniform": self.uniform,
            "adapter": self.adapter,
        }


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def _short(path: str) -> str:
    """A readable label for an adapter path: its last one or two components."""
    parts = [p for p in str(path).replace("\\", "/").split("/") if p and p != "."]
    if len(parts) >= 2 and parts[-1] in {"adapter", "best", "final"}:
        return "/".join(parts[-2:])
    return parts[-1] if parts else str(path)


def _number(kind: str, text: str, item: str) -> float:
    try:  # the command line's one number parser (1e3, 3/2, 1_000 as every numeric flag takes them)
        value = float(parse_number(text))
    except (ValueError, OverflowError):
        raise VariantError(f"variant {item!r}: {kind} needs a number, as in {kind}:1.25, got {text!r}") from None
    if not math.isfinite(value) or not FACTOR_MIN <= value <= FACTOR_MAX:
        raise VariantError(
            f"variant {item!r}: the {kind} factor must be finite, in [{FACTOR_MIN:g}, {FACTOR_MAX:g}], got {text}"
        )
    if kind in ROPE_TYPES and value < 1:
        raise VariantError(f"variant {item!r}: transformers' {kind} scaling needs a factor >= 1, got {text}")
    return value


def parse_variant(item: str) -> Variant:
    """Parse one spec (``[NAME=]PART[+PART...]``); raises :class:`VariantError` naming what is wrong."""
    text = item.strip()
    if not text:
        raise VariantError("empty variant in the list (two commas in a row?)")
    label = None
    head, sep, rest = text.partition("=")
    if sep and ":" not in head and "/" not in head and head.strip():
        label, text = head.strip(), rest.strip()
        if not text:
            raise VariantError(f"variant {item!r}: nothing after {label}=")
    rope_type = rope_factor = uniform = adapter = None
    is_base = False
    for raw in text.split("+"):
        part = raw.strip()
        kind, colon, value = part.partition(":")
        kind = kind.strip().lower()
        if kind not in VARIANT_KINDS and "=" in kind:
            raise VariantError(
                f"variant {item!r}: a label goes before the whole spec, as in NAME={text.replace(part, part.split('=', 1)[1])}"
            )
        if kind not in VARIANT_KINDS:
            raise VariantError(
                f"unknown variant {part!r} in {item!r}; known: base, uniform:F, adapter:PATH, "
                f"{', '.join(k + ':F' for k in ROPE_TYPES)} (join with '+', e.g. linear:2+adapter:PATH)"
            )
        if kind == "base":
            if colon:
                raise VariantError(f"variant {item!r}: 'base' takes no value")
            is_base = True
            continue
        if not colon or not value.strip():
            example = "adapter:out/adapter" if kind == "adapter" else f"{kind}:2"
            raise VariantError(f"variant {item!r}: {kind} needs a value, as in {example}")
        value = value.strip()
        if kind in ROPE_TYPES:
            if rope_type is not None:
                raise VariantError(f"variant {item!r}: at most one RoPE type ({rope_type} and {kind} given)")
            rope_type, rope_factor = kind, _number(kind, value, item)
        elif kind == "uniform" or kind == "adapter":
            if uniform is not None or adapter is not None:
                raise VariantError(f"variant {item!r}: at most one of uniform:F and adapter:PATH per variant")
            if kind == "uniform":
                uniform = _number(kind, value, item)
            else:
                adapter = value
    if is_base and (rope_type or uniform is not None or adapter):
        raise VariantError(f"variant {item!r}: 'base' cannot be combined with anything (drop 'base+')")
    variant = Variant(
        name="", rope_type=rope_type, rope_factor=rope_factor, uniform=uniform, adapter=adapter
    )  # the label needs the canonical spec
    if label is None:
        label = variant.spec if adapter is None else variant.spec.replace(adapter, _short(adapter))
    return Variant(label, rope_type, rope_factor, uniform, adapter)


def parse_variants(specs: str | Sequence[str]) -> list[Variant]:
    """Parse ``"base,uniform:1.1,adapter:PATH"`` (or a list of such strings) into variants with unique names."""
    items: list[str] = []
    for spec in [specs] if isinstance(specs, str) else list(specs):
        items.extend(spec.split(","))
    if not items or all(not i.strip() for i in items):
        raise VariantError("no variants given; for example: --variants base,uniform:1.1")
    variants = [parse_variant(i) for i in items]
    seen: dict[str, Variant] = {}
    for v in variants:
        if v.name in seen:
            raise VariantError(f"variant {v.name!r} is listed twice; give one a label, as in other={v.spec}")
        seen[v.name] = v
    return variants


# ------------------------------------------------------------------------------------------------------ configs


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def variant_rope_parameters(config: Any, variant: Variant) -> RopeSettings:
    """The ``rope_parameters`` a variant's model has, computed from the base model's config (no weights)."""
    text = _text_config(config)
    base = copy_rope_settings(text)
    if variant.rope_type is None:
        return base
    if not base:
        raise VariantError(f"variant {variant.name!r}: the model config has no rope_parameters to change")
    for params in rotaries(base):
        for key in ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow"):
            params.pop(key, None)
        params["rope_type"] = variant.rope_type
        params["factor"] = float(variant.rope_factor)
        if variant.rope_type == "yarn":
            params["original_max_position_embeddings"] = int(text.max_position_embeddings)
    return base


def variant_config(config: Any, variant: Variant) -> Any:
    """A deep copy of ``config`` whose text config carries the variant's RoPE type (validated by transformers)."""
    new = copy.deepcopy(config)
    text = _text_config(new)
    if variant.rope_type is not None:
        text.rope_parameters = variant_rope_parameters(config, variant)
        text.standardize_rope_params()
        try:
            text.validate_rope()
        except (KeyError, ValueError, TypeError) as exc:
            raise VariantError(f"variant {variant.name!r}: transformers refuses these RoPE settings: {exc}") from exc
    return new


def _head_dim(text: Any) -> int | None:
    head_dim = getattr(text, "head_dim", None)
    if head_dim is None and getattr(text, "num_attention_heads", None):
        head_dim = text.hidden_size // text.num_attention_heads
    return head_dim


@dataclass
class AdapterPlan:
    """How one variant's adapter is applied: loaded as saved, or rebuilt from its factors for a RoPE type."""

    source: str
    config: LrsConfig
    factors: list[float]
    load_as_saved: bool


def check_variants(variants: Sequence[Variant], config: Any) -> dict[str, AdapterPlan]:
    """Read every adapter (config + factors, no model) and check it against the model's ``config``.

    Returns ``{variant name: AdapterPlan}`` for the variants with ``adapter:``. Raises
    ``AdapterMismatchError`` for an adapter made for another model (layer count, head size, RoPE settings) and
    :class:`VariantError` for RoPE settings transformers refuses; both before any weight is loaded.
    """
    text = _text_config(config)
    num_layers = getattr(text, "num_hidden_layers", None)
    head_dim = _head_dim(text)
    base_rope = rope_signature(getattr(text, "rope_parameters", None))
    cache: dict[str, tuple[LrsConfig, list[float]]] = {}
    plans: dict[str, AdapterPlan] = {}
    for variant in variants:
        vconfig = variant_config(config, variant)  # validates the RoPE type even without an adapter
        if variant.adapter is None:
            continue
        if variant.adapter not in cache:
            lrs, tensor = read_adapter_factors(variant.adapter)
            cache[variant.adapter] = (lrs, [float(f) for f in tensor.tolist()])
        lrs, factors = cache[variant.adapter]
        where = f"variant {variant.name!r}: adapter {variant.adapter}"
        if num_layers is not None and lrs.num_layers != num_layers:
            raise AdapterMismatchError(
                f"{where} was made for a model with {lrs.num_layers} decoder layers, this {text.model_type} model "
                f"has {num_layers}: use an adapter made for this base model"
            )
        if head_dim is not None and lrs.head_dim is not None and lrs.head_dim != head_dim:
            raise AdapterMismatchError(
                f"{where} was made for head size {lrs.head_dim}, this {text.model_type} model has {head_dim}: "
                "use an adapter made for this base model"
            )
        made_for = rope_signature(lrs.base_rope_parameters)
        target = rope_signature(getattr(_text_config(vconfig), "rope_parameters", None))
        if lrs.base_rope_parameters is None or made_for == target:
            load_as_saved = True
        elif variant.rope_type is not None and made_for == base_rope:
            load_as_saved = False  # made on the plain model, combined with a RoPE type: rebuilt from its factors
        else:
            raise AdapterMismatchError(
                f"{where} was made for RoPE settings {made_for}, but this model has {base_rope}"
                + (f" and the variant sets {target}" if variant.rope_type else "")
                + ": the same factors mean something else on another RoPE configuration; "
                "use an adapter made for this base model"
            )
        plans[variant.name] = AdapterPlan(variant.adapter, lrs, factors, load_as_saved)
    return plans


# ------------------------------------------------------------------------------------------------------ models


def shared_weight_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` that shares every parameter tensor with it (buffers and modules are copied)."""
    memo: dict[int, Any] = {id(p): p for p in model.parameters()}
    return copy.deepcopy(model, memo)


def _rebuild_rotary(model: nn.Module) -> None:
    """Replace the rotary module by a fresh one built from the (already changed) config of ``model``."""
    site = find_rope_site(model)
    old = site.backbone.rotary_emb
    buffers = list(old.buffers())
    device = buffers[0].device if buffers else torch.device("cpu")
    cls = type(old)
    takes_device = "device" in inspect.signature(cls.__init__).parameters
    config = getattr(old, "config", None) or _text_config(model.config)
    new = cls(config, device=device) if takes_device else cls(config)
    site.backbone.rotary_emb = new.to(device)


@contextmanager
def quiet_peft() -> Iterator[None]:
    """Silence PEFT's read of transformers' deprecated ``is_gradient_checkpointing`` (a FutureWarning that tells
    our users nothing) while a PEFT model is made."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


@contextmanager
def build_variant(
    model: nn.Module, variant: Variant, plan: AdapterPlan | None = None, *, adapter_name: str = "default"
) -> Iterator[nn.Module]:
    """The variant's model, sharing ``model``'s weights, in eval mode; ``model`` itself is never changed.

    ``plan`` comes from :func:`check_variants` (required for ``adapter:`` variants). The base variant yields
    ``model`` itself.
    """
    if variant.is_base:
        yield model
        return
    if variant.adapter is not None and plan is None:
        raise VariantError(f"variant {variant.name!r}: run check_variants() first to read its adapter")
    work = shared_weight_copy(model)
    if variant.rope_type is not None:
        new_config = variant_config(work.config, variant)
        text_new, text_work = _text_config(new_config), _text_config(work.config)
        text_work.rope_parameters = text_new.rope_parameters  # the copy's modules share this config object
        _rebuild_rotary(work)
    with quiet_peft():
        if variant.uniform is not None:
            work = get_peft_model(work, LrsConfig(factors=variant.uniform), adapter_name=adapter_name)
        elif plan is not None:
            if plan.load_as_saved:
                work = PeftModel.from_pretrained(work, plan.source, adapter_name=adapter_name)
            else:
                provenance = dict(plan.config.provenance or {})
                provenance["combined_with"] = {
                    "source_adapter": plan.source,
                    "made_for_rope_parameters": plan.config.base_rope_parameters,
                }
                lrs = LrsConfig(factors=plan.factors, provenance=provenance)
                work = get_peft_model(work, lrs, adapter_name=adapter_name)
    yield work.eval()


def describe_variant(model: nn.Module) -> BuiltVariant:
    """RoPE settings and LRS factors of a built variant (for results.json)."""
    text = _text_config(getattr(model, "config", None))
    try:
        factors = get_factors(model)
    except TypeError:
        factors = None
    return {"rope_parameters": copy_rope_settings(text), "factors": factors}
