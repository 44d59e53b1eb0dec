"""Code for exported models with per-layer factors: the files written beside the weights, and the same classes
registered with transformers' auto classes so that an exported folder loads without ``trust_remote_code`` once
``rope_adapter.export`` is imported.

Both come from one source: the mixins in ``lrs_config.py`` and ``lrs_modeling.py``. A generated file is a short
header, the imports of the base classes from transformers, the mixin module's text below its marker line, and a
two-line class that puts the mixin in front of the base class, e.g.::

    class LlamaLrsForCausalLM(LrsForCausalLMMixin, LlamaForCausalLM):
        config_class = LlamaLrsConfig
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedConfig, PreTrainedModel
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from rope_adapter import LrsError

from .lrs_config import LrsConfigMixin
from .lrs_modeling import LrsForCausalLMMixin

MARKER = "# ---8<---"
MODEL_TYPE_SUFFIX = "_lrs"
_HERE = Path(__file__).parent


class CodegenError(LrsError):
    """No custom code can be written for this architecture (not a transformers built-in causal LM)."""


@dataclass(frozen=True)
class LrsNames:
    """Names of everything an exported model with per-layer factors defines, derived from the base model_type."""

    base_model_type: str  # "llama"
    base_config_class: str  # "LlamaConfig"
    base_model_class: str  # "LlamaForCausalLM"

    @property
    def model_type(self) -> str:
        return self.base_model_type + MODEL_TYPE_SUFFIX  # "llama_lrs"

    @property
    def config_class(self) -> str:
        return self.base_config_class.removesuffix("Config") + "LrsConfig"  # "LlamaLrsConfig"

    @property
    def model_class(self) -> str:
        return self.base_model_class.replace("ForCausalLM", "LrsForCausalLM")  # "LlamaLrsForCausalLM"

    @property
    def config_module(self) -> str:
        return f"configuration_{self.model_type}"

    @property
    def model_module(self) -> str:
        return f"modeling_{self.model_type}"

    @property
    def auto_map(self) -> dict[str, str]:
        return {
            "AutoConfig": f"{self.config_module}.{self.config_class}",
            "AutoModelForCausalLM": f"{self.model_module}.{self.model_class}",
        }


def lrs_names(base_model_type: str) -> LrsNames:
    """Names for ``base_model_type``; raises CodegenError unless transformers has a built-in causal LM for it."""
    if base_model_type.endswith(MODEL_TYPE_SUFFIX):
        raise CodegenError(
            f"model_type {base_model_type!r} is already an exported LRS model: export from its base model instead"
        )
    config_name = CONFIG_MAPPING_NAMES.get(base_model_type)
    model_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(base_model_type)
    if not isinstance(model_name, str) or not isinstance(config_name, str):
        raise CodegenError(
            f"transformers {transformers.__version__} has no built-in causal LM for model_type "
            f"{base_model_type!r}: per-layer factors can only be exported for those"
        )
    for name in (config_name, model_name):
        if not hasattr(transformers, name):
            raise CodegenError(f"transformers does not export {name} at top level; cannot write code for it")
    if "ForCausalLM" not in model_name:
        raise CodegenError(f"{model_name} is not named *ForCausalLM; cannot name its LRS subclass")
    return LrsNames(base_model_type, config_name, model_name)


def names_for_model(model: PreTrainedModel) -> LrsNames:
    """Names for a loaded model, checking that it is exactly transformers' own class for its model_type."""
    names = lrs_names(model.config.model_type)
    for obj, expected in ((model, names.base_model_class), (model.config, names.base_config_class)):
        if type(obj) is not getattr(transformers, expected):
            raise CodegenError(
                f"{type(obj).__module__}.{type(obj).__name__} is not transformers' {expected}: exported code "
                f"subclasses the built-in class of model_type {names.base_model_type!r}"
            )
    return names


def _copied_part(module_file: str) -> str:
    text = (_HERE / module_file).read_text()
    _, sep, body = text.partition(MARKER)
    if not sep:  # pragma: no cover - guards an edit of the mixin modules
        raise RuntimeError(f"{module_file} lacks its '{MARKER}' line")
    return body.split("\n", 1)[1].strip("\n")


def _header(title: str, names: LrsNames, version: str) -> str:
    text = f"""\
        {title}

        Written by `rope-adapter export` (rope-adapter {version}); imports only torch and transformers.
        Decoder layer l rotates queries and keys with inv_freq / lrs_factors[l] (layer-specific RoPE scaling,
        arXiv 2503.04355), where inv_freq and the attention scaling come from the base model's own RoPE
        (model_type {names.base_model_type!r}). The factors are the `lrs_factors` field of config.json.

        Load the folder with AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True), or
        without trust_remote_code after `import rope_adapter.export`.
        """
    return '"""' + textwrap.dedent(text).rstrip("\n") + '\n"""\n'


def render_configuration(names: LrsNames, version: str) -> str:
    """Text of ``configuration_<type>_lrs.py``."""
    return (
        _header(
            f"{names.base_config_class} with per-layer RoPE factors (model_type {names.model_type!r}).", names, version
        )
        + f"\nfrom transformers import {names.base_config_class}\n\n\n"
        + _copied_part("lrs_config.py")
        + f"\n\n\nclass {names.config_class}(LrsConfigMixin, {names.base_config_class}):\n"
        + f'    model_type = "{names.model_type}"\n'
    )


def render_modeling(names: LrsNames, version: str) -> str:
    """Text of ``modeling_<type>_lrs.py``."""
    return (
        _header(f"{names.base_model_class} with layer-specific RoPE scaling.", names, version)
        + "\nimport torch\nfrom torch import nn\n"
        + f"from transformers import {names.base_model_class}\n\n"
        + f"from .{names.config_module} import {names.config_class}\n\n\n"
        + _copied_part("lrs_modeling.py")
        + f"\n\n\nclass {names.model_class}(LrsForCausalLMMixin, {names.base_model_class}):\n"
        + f"    config_class = {names.config_class}\n"
    )


def write_code(folder: Path, names: LrsNames, version: str) -> list[str]:
    """Write both code files into ``folder``; returns their names."""
    files = {
        f"{names.config_module}.py": render_configuration(names, version),
        f"{names.model_module}.py": render_modeling(names, version),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return sorted(files)


@cache
def lrs_classes(base_model_type: str) -> tuple[type[PreTrainedConfig], type[PreTrainedModel]]:
    """The config and model classes of ``<base_model_type>_lrs``, built in process from the same mixins."""
    names = lrs_names(base_model_type)
    base_config = getattr(transformers, names.base_config_class)
    base_model = getattr(transformers, names.base_model_class)
    config_cls = type(
        names.config_class,
        (LrsConfigMixin, base_config),
        {"model_type": names.model_type, "__module__": __name__, "__qualname__": names.config_class},
    )
    model_cls = type(
        names.model_class,
        (LrsForCausalLMMixin, base_model),
        {"config_class": config_cls, "__module__": __name__, "__qualname__": names.model_class},
    )
    globals()[names.config_class] = config_cls  # so that pickle finds them
    globals()[names.model_class] = model_cls
    return config_cls, model_cls


def register_lrs_model_type(base_model_type: str) -> tuple[type[PreTrainedConfig], type[PreTrainedModel]]:
    """Let ``AutoConfig`` / ``AutoModelForCausalLM`` load ``<base_model_type>_lrs`` folders without remote code.

    Done on ``import rope_adapter.export`` for every tested architecture; call it for any other base type.
    """
    config_cls, model_cls = lrs_classes(base_model_type)
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)
    return config_cls, model_cls
