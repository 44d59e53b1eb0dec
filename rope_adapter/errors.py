"""Errors raised by rope_adapter. Each one says what was wrong and what to do about it."""

from __future__ import annotations


class LrsError(ValueError):
    """Base class of every error rope_adapter raises on bad input."""


class InvalidFactorsError(LrsError):
    """Factors that cannot be used: wrong count, NaN, infinite, zero or negative."""


class UnsupportedModelError(LrsError):
    """A model without RoPE, or whose decoder layers do not take `position_embeddings`."""


class AdapterMismatchError(LrsError):
    """An adapter made for another base model (layer count, head size, RoPE type)."""


class AdapterFileError(LrsError):
    """A corrupt or hand-edited adapter_config.json or adapter_model.safetensors."""


class AdapterNameError(LrsError):
    """An adapter name that the model does not hold (never added, deleted, or the model was unloaded)."""


class MergeError(LrsError):
    """Factors that cannot be folded into the base model's own RoPE configuration."""


MISSING_IMPORT_HINT = (
    "The adapter has peft_type 'LRS', which PEFT only knows after `import rope_adapter`. "
    "Add `import rope_adapter` before `PeftModel.from_pretrained(...)`."
)


class NotJsonError(LrsError):
    """A value strict JSON cannot hold (NaN, an infinity, an object of another type) on its way into a file we
    write; ``where`` is the file (or the argument), ``field`` the path of the first such value in it."""

    def __init__(self, where: str, field: str, what: str) -> None:
        self.where, self.field, self.what = where, field, what
        fix = (
            "give a finite number (or None where the value is unknown)"
            if what in ("nan", "inf", "-inf")
            else "convert it to a str, int, float, bool, None, list or dict with str keys first (a datetime with "
            ".isoformat(), a numpy number with float())"
        )
        super().__init__(f"{where}: {field} is {what}, which JSON cannot hold: {fix}")

    def __reduce__(self) -> tuple:  # picklable across processes (the arguments are not the message)
        return (type(self), (self.where, self.field, self.what))


class RecordFileError(LrsError):
    """A JSON file we read that does not match its typed record: not JSON, or a field missing or of the wrong
    type. ``file`` is the file, ``field`` the path of the first wrong field ("" for the whole file)."""

    def __init__(self, file: str, field: str, problem: str) -> None:
        self.file, self.field, self.problem = file, field, problem
        where = f"{file}: {field}" if field else str(file)
        super().__init__(f"{where} {problem}")

    def __reduce__(self) -> tuple:
        return (type(self), (self.file, self.field, self.problem))


class FolderFormatError(LrsError):
    """A folder that holds weights in another format that rope-adapter did not write, where a save would leave
    two sets of weights for a loader to choose from."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name when the message is blank): what a one-line error
    quotes of a library's own error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
