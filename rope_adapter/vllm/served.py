"""Which exported types the vLLM plugin serves, and the one-line refusal for the others. No vLLM import."""

from __future__ import annotations

from ..architectures import TESTED_MODEL_TYPES
from ..errors import LrsError

SERVED: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}
"""Base model_type -> the vLLM architecture whose model class the plugin extends (each checked against the
adapter by the vLLM tests)."""

NOT_SERVED: dict[str, str] = {
    "gpt_neox": "GPTNeoXForCausalLM",
}
"""Exported types vLLM has no model class of its own for (it runs them through its Transformers backend, whose
model would ignore the factors)."""


class VllmServingError(LrsError):
    """An exported folder the vLLM plugin cannot serve: the message is one line saying why and what to do."""


def refusal(base_model_type: str, vllm_version: str, has_own_class: bool) -> VllmServingError:
    """The one-line error for an exported ``<base_model_type>_lrs`` folder the plugin does not serve."""
    model_type = f"{base_model_type}_lrs"
    if base_model_type in NOT_SERVED and not has_own_class:
        why = (
            f"vLLM {vllm_version} has no model class of its own for {NOT_SERVED[base_model_type]} (only its "
            f"Transformers backend, which would run the model without the per-layer factors)"
        )
    elif base_model_type in TESTED_MODEL_TYPES or has_own_class:
        why = f"the plugin has not been checked on vLLM's model class for {base_model_type!r}"
    else:
        why = f"vLLM {vllm_version} has no model class for {base_model_type!r}"
    return VllmServingError(
        f"rope-adapter cannot serve model_type {model_type!r} in vLLM: {why}; it serves "
        f"{', '.join(f'{t}_lrs' for t in SERVED)}. Load this folder with transformers instead "
        f"(`import rope_adapter`, or trust_remote_code=True)."
    )
