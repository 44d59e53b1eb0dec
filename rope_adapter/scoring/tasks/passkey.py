"""Passkey retrieval (Mohtashami & Jaggi, 2023): a number hidden at a chosen depth in repeated filler text.

Prompt (the usual wording)::

    There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you
    about the important information there.

    <filler> ... The pass key is 12345. Remember it. 12345 is the pass key. ... <filler>

    What is the pass key? The pass key is

The gold position is the filler slot after which the needle sits (0: before all filler, ``num_filler``: after all
of it). Each position has its own prefix: the needle moves, so nothing but the instruction is shared.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from .base import Sample, Task, pick_positions, task_int, task_positions
from .registry import TaskError, register_task

PASSKEY_INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there."
)
DEFAULT_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
PASSKEY_QUERY = "\n\nWhat is the pass key? The pass key is"


@dataclass(frozen=True)
class PasskeyRecord:
    """One passkey to hide."""

    record_id: str
    passkey: str


def passkey_prefix(passkey: str, slot: int, num_filler: int, filler: str = DEFAULT_FILLER) -> str:
    """Instruction and filler with the needle after ``slot`` filler units."""
    units = [filler] * num_filler
    units.insert(slot, NEEDLE.format(key=passkey))
    return PASSKEY_INSTRUCTION + "\n\n" + " ".join(units)


def passkey_is_correct(prediction: str, passkey: str) -> bool:
    """The passkey appears in the answer as a whole number (not inside a longer digit run)."""
    return re.search(rf"(?<!\d){re.escape(passkey)}(?!\d)", prediction) is not None


@register_task("passkey")
@dataclass
class PasskeyTask(Task):
    """Passkey retrieval with generated passkeys."""

    display_name: ClassVar[str] = "passkey retrieval"

    num_records: int = field(default=50, metadata={"help": "Number of passkeys."})
    num_filler: int = field(default=40, metadata={"help": "Filler units in the context (~22 tokens each)."})
    positions: Sequence[int] | None = field(
        default=None, metadata={"help": "Needle slots in 0..num_filler; default num_positions evenly spaced."}
    )
    num_positions: int = field(default=5, metadata={"help": "Number of default positions."})
    digits: int = field(default=5, metadata={"help": "Digits of a passkey."})
    seed: int = field(default=0, metadata={"help": "Seed of the passkeys."})
    filler: str = field(default=DEFAULT_FILLER, metadata={"help": "One unit of filler text."})

    generation_slack = 4

    def __post_init__(self) -> None:
        # Kept apart from mdqa.py's and kv_retrieval.py's checks, alike in shape: each task checks its own fields
        # with their own bounds, in field order.
        self.num_records = task_int(self.num_records, "num_records", low=1)
        self.num_filler = task_int(self.num_filler, "num_filler", low=1)
        self.positions = task_positions(self.positions)
        self.num_positions = task_int(self.num_positions, "num_positions")
        self.digits = task_int(self.digits, "digits", low=1, high=18)
        self.seed = task_int(self.seed, "seed")
        if not isinstance(self.filler, str) or not self.filler.strip():
            raise TaskError("filler must not be empty")
        self.gold_positions()

    def gold_positions(self) -> list[int]:
        """Needle slots (validated)."""
        return pick_positions(self.positions, self.num_filler + 1, self.num_positions, "filler slots")

    def load_records(self) -> list[PasskeyRecord]:
        """``num_records`` passkeys of ``digits`` digits (no leading zero) from ``seed``."""
        rng = random.Random(self.seed)
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        return [
            PasskeyRecord(f"passkey-seed{self.seed}:{i}", str(rng.randint(low, high))) for i in range(self.num_records)
        ]

    def build_samples(self, records: Sequence[PasskeyRecord]) -> list[Sample]:
        """One sample per record and needle slot."""
        positions = self.gold_positions()
        return [
            Sample(
                prefix=passkey_prefix(record.passkey, p, self.num_filler, self.filler),
                query=PASSKEY_QUERY,
                answers=[record.passkey],
                position=p,
                record_id=record.record_id,
                target=" " + record.passkey,
                task=self.name,
            )
            for record in records
            for p in positions
        ]

    def is_correct(self, prediction: str, sample: Sample) -> bool:
        """The passkey appears in the answer."""
        return passkey_is_correct(prediction, sample.answers[0])
