"""Which exported types the vLLM plugin serves, and the one-line refusal for the others. No vLLM import."""

from __future__ import annotations

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


class VllmServingError(LrsError):
    """An exported folder the vLLM plugin cannot serve: the message is one line saying why and what to do."""


def refusal(base_model_type: str, base_arch: str, vllm_version: str, has_own_class: bool) -> VllmServingError:
    """The one-line error for an exported ``<base_model_type>_lrs`` folder the plugin does not serve."""
    if has_own_class:
        why = f"the plugin has not been checked on vLLM's {base_arch}"
    else:
        why = (
            f"vLLM {vllm_version} has no model class of its own for {base_arch} (at most its Transformers backend, "
            f"which would run the model without the per-layer factors)"
        )
    return VllmServingError(
        f"rope-adapter cannot serve model_type '{base_model_type}_lrs' in vLLM: {why}; it serves "
        f"{', '.join(f'{t}_lrs' for t in SERVED)}. Load this folder with transformers instead "
        f"(`import rope_adapter`, or trust_remote_code=True)."
    )
