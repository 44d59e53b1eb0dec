"""Code for exported models with per-layer factors: the files written beside the weights, and the same classes
registered with transformers' auto classes so that an exported folder loads without ``trust_remote_code`` once
``rope_adapter`` is imported (rope_adapter.standalone), and written again when such a model or config is saved
in a process that loaded it through those classes (so a re-saved folder keeps the code its ``auto_map`` names).

Both come from one source: the mixins in ``rope_adapter/standalone/config_mixin.py`` and ``modeling_mixin.py``. A generated file is a short
header, the imports of the base classes from transformers, the mixin module's text below its marker line, and a
two-line class that puts the mixin in front of the base class, e.g.::

    class LlamaLrsForCausalLM(LrsForCausalLMMixin, LlamaForCausalLM):
        config_class = LlamaLrsConfig
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from .. import files
from .names import LrsNames

MARKER = "# ---8<---"
_MIXINS = Path(__file__).parent


def _copied_part(module_file: str) -> str:
    text = (_MIXINS / module_file).read_text()
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
        without trust_remote_code in a process that has imported the rope-adapter package.
        """
    return '"""' + textwrap.dedent(text).rstrip("\n") + '\n"""\n'


def render_configuration(names: LrsNames, version: str) -> str:
    """Text of ``configuration_<type>_lrs.py``."""
    return (
        _header(
            f"{names.base_config_class} with per-layer RoPE factors (model_type {names.model_type!r}).", names, version
        )
        + f"\nfrom transformers import {names.base_config_class}\n\n\n"
        + _copied_part("config_mixin.py")
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
        + _copied_part("modeling_mixin.py")
        + f"\n\n\nclass {names.model_class}(LrsForCausalLMMixin, {names.base_model_class}):\n"
        + f"    config_class = {names.config_class}\n"
    )


def write_code(folder: Path, names: LrsNames, version: str) -> list[str]:
    """Write both code files into ``folder``; returns their names."""
    texts = {
        f"{names.config_module}.py": render_configuration(names, version),
        f"{names.model_module}.py": render_modeling(names, version),
    }
    for name, text in texts.items():
        files.write_text(folder / name, text)
    return sorted(texts)
