"""The names an exported model with per-layer factors defines, derived from its base model_type."""

from __future__ import annotations

from dataclasses import dataclass

MODEL_TYPE_SUFFIX = "_lrs"


@dataclass(frozen=True)
class LrsNames:
    """Names of everything an exported model with per-layer factors defines, derived from the base model_type."""

    base_model_type: str  # "llama"
    base_config_class: str  # "LlamaConfig"
    base_model_class: str  # "LlamaForCausalLM"

    # Kept apart from embedded.registry.WheelPart, which these properties resemble in shape only: names derived
    # from a string each, for different things.
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
