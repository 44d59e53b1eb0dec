"""LrsModel: the PEFT tuner that injects layer-specific RoPE scaling into a transformers decoder."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTuner
from torch import nn

from .architectures import RopeSite, find_rope_site
from .config import LrsConfig, check_provenance
from .errors import AdapterFileError, AdapterMismatchError, AdapterNameError, LrsError, MergeError
from .factors import check_factors_tensor, validate_factors
from .layer import LrsRotaryLayer, install_layer_hooks, remove_layer_hooks
from .rope_settings import rope_signature
from .saving import FACTORS_KEY_SUFFIX


def bind_config(config: LrsConfig, site: RopeSite, model: nn.Module) -> None:
    """Fill a fresh config from the model, or check a loaded one against it (AdapterMismatchError)."""
    head_dim = _head_dim(model)
    where = "adapter"
    if config.num_layers is not None and config.num_layers != site.num_layers:
        raise AdapterMismatchError(
            f"{where} was made for a model with {config.num_layers} decoder layers, this "
            f"{site.model_type} model has {site.num_layers}: use an adapter made for this base model"
        )
    if config.head_dim is not None and head_dim is not None and config.head_dim != head_dim:
        raise AdapterMismatchError(
            f"{where} was made for head size {config.head_dim}, this {site.model_type} model has {head_dim}: "
            f"use an adapter made for this base model"
        )
    if config.rotary_dim is not None and config.rotary_dim != site.rotary_dim:
        raise AdapterMismatchError(
            f"{where} was made for {config.rotary_dim} rotary channels per head, this model rotates "
            f"{site.rotary_dim}: use an adapter made for this base model"
        )
    if config.base_rope_parameters is not None:
        want, have = rope_signature(config.base_rope_parameters), rope_signature(site.rope_parameters)
        if want != have:
            raise AdapterMismatchError(
                f"{where} was made for RoPE settings {want}, this model has {have}: the same factors mean "
                f"something else on another RoPE configuration; use an adapter made for this base model"
            )
    factors = [1.0] * site.num_layers if config.factors is None else config.factors
    config.factors = validate_factors(factors, site.num_layers)
    config.num_layers = site.num_layers
    config.head_dim = head_dim
    config.rotary_dim = site.rotary_dim
    config.base_model_type = config.base_model_type or site.model_type
    if config.base_rope_parameters is None:
        config.base_rope_parameters = copy.deepcopy(site.rope_parameters)
    config.target_modules = site.rotary_name


def _head_dim(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    head_dim = getattr(text, "head_dim", None)
    if head_dim is None and getattr(text, "num_attention_heads", None):
        head_dim = text.hidden_size // text.num_attention_heads
    return head_dim


class LrsModel(BaseTuner):
    """Layer-specific RoPE scaling (arXiv 2503.04355) as a PEFT tuner with zero trainable parameters.

    The model's rotary module is wrapped by :class:`LrsRotaryLayer`; each decoder layer's ``forward`` (or a forward
    pre-hook, where another library replaced it) hands it the pair that rotates with ``inv_freq / factors[layer]``. ``set_adapter``, ``disable_adapter``, ``delete_adapter``,
    ``unload`` and several named adapters work through PEFT's own machinery.
    """

    prefix: str = "lrs_"
    tuner_layer_cls = LrsRotaryLayer
    target_module_mapping: dict = {}

    # --- injection -------------------------------------------------------------------------------------------
    def inject_adapter(
        self,
        model: nn.Module,
        adapter_name: str,
        autocast_adapter_dtype: bool = True,
        low_cpu_mem_usage: bool = False,
        state_dict: dict[str, torch.Tensor] | None = None,
    ) -> None:
        config = self.peft_config[adapter_name]
        self._check_new_adapter_config(config)
        site = find_rope_site(model)
        bind_config(config, site, model)
        current = site.backbone.rotary_emb
        if isinstance(current, LrsRotaryLayer):
            current.update_layer(adapter_name, config.factors)
            current.set_adapter(current.active_adapters)
        else:
            # what a refused load must give back (see _rollback_adapter)
            self._lrs_requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
            wrapper = LrsRotaryLayer(current, adapter_name, config.factors, site.layout, site.layer_types)
            site.backbone.rotary_emb = wrapper
            install_layer_hooks(site.layers)
        if not getattr(self, "_lrs_save_check", False):  # save_pretrained reads state_dict() before writing
            self.register_state_dict_pre_hook(_check_configs_before_save)
            self._lrs_save_check = True
        self.targeted_module_names = [site.rotary_name]
        self._mark_only_adapters_as_trainable(model)
        if config.inference_mode:
            for _, p in model.named_parameters():
                p.requires_grad = False

    def _create_and_replace(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - inject_adapter is ours
        raise NotImplementedError

    def _mark_only_adapters_as_trainable(self, model: nn.Module) -> None:
        for p in model.parameters():
            p.requires_grad = False

    @staticmethod
    def _prepare_adapter_config(peft_config: LrsConfig, model_config: dict) -> LrsConfig:
        return peft_config

    def _check_new_adapter_config(self, config: LrsConfig) -> None:
        if not isinstance(config, LrsConfig):
            raise TypeError(f"expected an LrsConfig, got {type(config).__name__}")

    def _cast_adapter_dtype(self, adapter_name: str, autocast_adapter_dtype: bool = True) -> None:
        pass  # factors are float32 buffers by construction

    # --- helpers ---------------------------------------------------------------------------------------------
    def _wrapper(self) -> LrsRotaryLayer | None:
        for module in self.model.modules():
            if isinstance(module, LrsRotaryLayer):
                return module
        return None

    def _adapter(self, adapter_name: str | None) -> tuple[str, LrsRotaryLayer]:
        """The adapter's name and the wrapper that holds its factors, or AdapterNameError."""
        wrapper = self._wrapper()
        if wrapper is None:
            raise AdapterNameError(
                "this model holds no LRS adapter any more (unload(), merge_and_unload() or delete_adapter() removed "
                "it): load or add an adapter first"
            )
        name = adapter_name or self.active_adapters[0]
        if name not in self.peft_config or name not in wrapper.lrs_factors:
            raise AdapterNameError(
                f"no LRS adapter named {name!r}; this model holds {sorted(wrapper.lrs_factors)}: pass one of those"
            )
        return name, wrapper

    def set_factors(self, factors: float | list[float], adapter_name: str | None = None) -> None:
        """Replace an adapter's factors in place (config and tensor); cheap enough for every search trial."""
        name, wrapper = self._adapter(adapter_name)
        config = self.peft_config[name]
        values = validate_factors(factors, config.num_layers)
        wrapper.set_factors(name, values)
        config.factors = values

    def get_factors(self, adapter_name: str | None = None) -> list[float]:
        name, wrapper = self._adapter(adapter_name)
        return wrapper.lrs_factors[name].tolist()

    # --- loading ---------------------------------------------------------------------------------------------
    @classmethod
    def _remap_adapter_state_dict_for_load(
        cls, model: nn.Module, config: LrsConfig, adapter_name: str, state_dict: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        try:
            return cls._checked_state_dict(model, config, adapter_name, state_dict)
        except LrsError:
            _rollback_adapter(model, adapter_name)
            raise

    @classmethod
    def _checked_state_dict(
        cls, model: nn.Module, config: LrsConfig, adapter_name: str, state_dict: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        keys = [k for k in state_dict if k.split(".")[-1] == FACTORS_KEY_SUFFIX]
        others = [k for k in state_dict if k not in keys]
        where = "adapter_model.safetensors"
        if len(keys) != 1 or others:
            raise AdapterFileError(
                f"{where} must hold exactly one tensor named '*.{FACTORS_KEY_SUFFIX}', found {sorted(state_dict)}; "
                f"re-save the adapter with save_pretrained()"
            )
        tensor = state_dict[keys[0]]
        check_factors_tensor(tensor, config.num_layers, where)
        stored = torch.tensor(config.factors, dtype=torch.float32)
        if not torch.equal(tensor.cpu(), stored):
            if config.changed_on_disk():
                raise AdapterFileError(
                    f"the adapter folder was saved again while it was being loaded (adapter_config.json was read "
                    f"before, {where} after the other save): load it again; this model was left as it was"
                )
            raise AdapterFileError(
                f"{where} and adapter_config.json disagree on the factors ({tensor.tolist()} vs {config.factors}); "
                f"the folder was edited by hand: re-save it with save_pretrained()"
            )
        wrapper_name = next(n for n, m in model.named_modules() if isinstance(m, LrsRotaryLayer))
        if keys[0].removeprefix("base_model.model.") != f"{wrapper_name.removeprefix('base_model.model.')}.lrs_factors":
            raise AdapterFileError(
                f"{where} stores factors for module '{keys[0]}', this model keeps them at '{wrapper_name}': the "
                f"adapter was made for another architecture"
            )
        return super()._remap_adapter_state_dict_for_load(model, config, adapter_name, state_dict)

    def _restore_base_model(self) -> None:
        """Give the base model back as it was before the first adapter: no wrapper, no hooks, no peft_config,
        each parameter's requires_grad as it was."""
        self._unwrap()
        saved = getattr(self, "_lrs_requires_grad", {})
        for name, p in self.model.named_parameters():
            if name in saved:
                p.requires_grad_(saved[name])
        self.model.__dict__.pop("peft_config", None)

    # --- unloading -------------------------------------------------------------------------------------------
    def delete_adapter(self, adapter_name: str) -> None:
        super().delete_adapter(adapter_name)
        if not self.peft_config:
            self._unwrap()

    def _unwrap(self) -> None:
        site = find_rope_site(self.model)
        wrapper = site.backbone.rotary_emb
        if isinstance(wrapper, LrsRotaryLayer):
            site.backbone.rotary_emb = wrapper.get_base_layer()
        remove_layer_hooks(site.layers)

    def _unload_and_optionally_merge(
        self,
        merge: bool = True,
        progressbar: bool = False,
        safe_merge: bool = False,
        adapter_names: list[str] | None = None,
    ) -> nn.Module:
        if merge:
            self._merge_into_rope_parameters(adapter_names)
        else:
            self._unwrap()
        if hasattr(self.model, "peft_config"):
            del self.model.peft_config
        return self.model

    def _merge_into_rope_parameters(self, adapter_names: list[str] | None) -> None:
        names = adapter_names or self.active_adapters
        if len(names) != 1:
            raise MergeError(f"merge one LRS adapter at a time, got {names}")
        factors = self.get_factors(names[0])
        site = find_rope_site(self.model)
        uniform = all(f == factors[0] for f in factors)
        params = site.rope_parameters
        rope_type = params.get("rope_type", "default")
        if not uniform or site.layer_types is not None or rope_type not in ("default", "linear"):
            raise MergeError(
                "only uniform factors on a default/linear-RoPE model fold into the model's own rope_parameters; "
                f"these are {'per-layer' if not uniform else 'on ' + repr(rope_type) + ' RoPE'}. Export the "
                "scaled model instead: `rope-adapter export --model BASE --adapter ADAPTER --out DIR` "
                "(or rope_adapter.export in Python)"
            )
        self._unwrap()
        s = factors[0]
        if s != 1.0:
            text = self.model.config.get_text_config()
            previous = float(params.get("factor", 1.0)) if rope_type == "linear" else 1.0
            new_factor = previous * float(s)
            if math.isclose(new_factor, round(new_factor, 6)):
                new_factor = round(new_factor, 6)
            text.rope_parameters = {**params, "rope_type": "linear", "factor": new_factor}
            old = site.backbone.rotary_emb
            device = old.inv_freq.device
            site.backbone.rotary_emb = type(old)(config=text).to(device)


def _rollback_adapter(peft_model: nn.Module, adapter_name: str) -> None:
    """Undo the injection of an adapter whose weights were refused while loading (``load_adapter``,
    ``PeftModel.from_pretrained``): it disappears entirely, and the last one leaves the base model as it was."""
    tuner = getattr(peft_model, "base_model", None)
    if not isinstance(tuner, LrsModel):
        return
    tuner.peft_config.pop(adapter_name, None)
    wrapper = tuner._wrapper()
    if wrapper is not None and adapter_name in wrapper.lrs_factors:
        del wrapper.lrs_factors[adapter_name]
    if not tuner.peft_config:
        tuner._restore_base_model()


def _check_configs_before_save(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    """State-dict pre-hook of the tuner: ``save_pretrained`` reads the state dict before it writes any file, so a
    provenance that cannot be written as JSON is refused here, before the folder is touched."""
    for config in getattr(module, "peft_config", {}).values():
        if isinstance(config, LrsConfig):
            check_provenance(config.provenance)
