"""Key-value retrieval from Lost in the Middle (Liu et al., 2023), with one shared prefix per record.

The prompt is the benchmark's, character for character::

    Extract the value corresponding to the specified key in the JSON object below.

    JSON data:
    {"k1": "v1",
     "k2": "v2",
     ...
     "kN": "vN"}

    Key: "k"
    Corresponding value:

The benchmark moves the gold pair to the gold index under test and asks for its key. Here the JSON of a record
is kept as it is and, for gold position ``p``, the question asks for the key that sits at index ``p``. Every
key and value is an independent uuid4, so a record with pair ``p`` asked for is distributed exactly like a record
whose gold pair was moved to ``p``: the gold is at position ``p`` and everything else is random filler. The gain
is that all positions of a record share one prefix (instruction + JSON) and differ only in the short query
``\\n\\nKey: "{key}"\\nCorresponding value:``, so scoring runs the long context once per record, not once per
position. The file's own ``key``/``value`` fields are therefore not used.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .base import Sample, Task, optional_task_int, pick_positions, read_jsonl, task_int, task_positions
from .registry import TaskError, register_task

KV_INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object below."
KV_QUERY = '\n\nKey: "{key}"\nCorresponding value:'


@dataclass(frozen=True)
class KVRecord:
    """One JSON object of key-value pairs (uuid4 strings), in prompt order."""

    record_id: str
    pairs: tuple[tuple[str, str], ...]


def format_kv_records(pairs: Sequence[tuple[str, str]]) -> str:
    """The benchmark's rendering: ``{"k": "v",\\n "k": "v",\\n ... "k": "v"}``."""
    lines = [f'"{key}": "{value}"' for key, value in pairs]
    return "{" + ",\n ".join(lines) + "}"


def kv_prefix(pairs: Sequence[tuple[str, str]]) -> str:
    """Instruction and JSON: the part of the prompt shared by every gold position of a record."""
    return f"{KV_INSTRUCTION}\n\nJSON data:\n{format_kv_records(pairs)}"


def kv_prompt(pairs: Sequence[tuple[str, str]], key: str) -> str:
    """The full benchmark prompt asking for ``key``."""
    return kv_prefix(pairs) + KV_QUERY.format(key=key)


def kv_is_correct(prediction: str, value: str) -> bool:
    """The benchmark's rule: the gold value appears in the answer, case-insensitive."""
    return value.lower() in prediction.lower()


def random_uuid4(rng: random.Random) -> str:
    """A uuid4 string drawn from a seeded generator (reproducible, unlike ``uuid.uuid4``)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


DEFAULT_NUM_POSITIONS = 25
"""Gold positions scored per record when neither ``positions`` nor ``num_positions`` is given (every position of a
record with fewer pairs). Measured on Qwen2.5-Coder-0.5B at 50 pairs (benchmarks/results/
positions_per_record_qwen_50pairs): a pass over a record costs 1.0, 1.3, 2.3 and 3.3x the CPU time at 5, 10, 25 and
50 positions, and the paired standard error of a difference between two curves per CPU-hour is 1.0, 0.81, 0.68 and
0.58-0.61x that of 5 positions (intervals over records). 25 takes most of that gain at two thirds of the cost of
every position, and keeps a pass at 100 or 140 pairs from growing with the record."""

MIN_TOKENS_PER_PAIR = 10
"""Fewer tokens than any tokenizer gives a generated key-value pair (two uuids, quotes, separators: about 80
characters), so a record size that is certainly too long is refused before its records are made."""


def pairs_overflow(num_pairs: int, max_positions: int | None) -> str | None:
    """Why ``num_pairs`` generated pairs cannot fit ``max_positions`` whatever the tokenizer, or None."""
    if not max_positions or num_pairs * MIN_TOKENS_PER_PAIR <= max_positions:
        return None
    return (
        f"the prompts are longer ({num_pairs * MIN_TOKENS_PER_PAIR} tokens at least, a key-value pair takes "
        f"{MIN_TOKENS_PER_PAIR} or more) than the model's {max_positions} positions"
    )


@register_task("kv_retrieval")
@dataclass
class KVRetrievalTask(Task):
    """Key-value retrieval: which value belongs to the key at gold position ``p`` of a JSON object.

    Records come from a Lost in the Middle ``kv-retrieval-*.jsonl.gz`` file (``data_path``) or are generated
    from ``seed`` (``num_records`` objects of ``num_pairs`` uuid4 pairs).
    """

    display_name: ClassVar[str] = "KV retrieval"
    length_option: ClassVar[str | None] = "num_pairs"

    data_path: str | None = field(
        default=None, metadata={"help": "Lost in the Middle kv-retrieval .jsonl(.gz); None generates records."}
    )
    num_records: int | None = field(
        default=None, metadata={"help": "Records to read (first n) or generate (default 50); None reads all."}
    )
    num_pairs: int = field(default=20, metadata={"help": "Pairs per generated record (ignored for files)."})
    positions: Sequence[int] | None = field(
        default=None, metadata={"help": "Gold indices; default num_positions evenly spaced, ends included."}
    )
    num_positions: int | None = field(
        default=None,
        metadata={
            "help": f"Number of evenly spaced gold positions; None: {DEFAULT_NUM_POSITIONS}, or every position of a "
            "shorter record."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the generated records."})
    target_prefix: str = field(
        default=" ", metadata={"help": "Text before the gold value in the teacher-forced target."}
    )
    alt_target_prefixes: tuple[str, ...] = field(
        default=(' "',),
        metadata={
            "help": "Other openings of the answer scored too (teacher-forced accuracy takes the form the model "
            "writes); the default ' \"' covers models that answer with a quoted value. () scores one form."
        },
    )

    generation_slack = 4

    @classmethod
    def length_overflow(cls, options: dict[str, Any], max_positions: int | None) -> str | None:
        """:func:`pairs_overflow` of generated records (a file's records are measured once read)."""
        if options.get("data_path") is not None:
            return None
        return pairs_overflow(options.get("num_pairs", KVRetrievalTask.num_pairs), max_positions)

    @classmethod
    def default_position_count(cls, options: dict[str, Any]) -> int | None:
        """:data:`DEFAULT_NUM_POSITIONS`, or every pair of generated records with fewer (a file's: once read)."""
        if options.get("data_path") is not None:
            return None
        return min(DEFAULT_NUM_POSITIONS, task_int(options.get("num_pairs", KVRetrievalTask.num_pairs), "num_pairs"))

    def __post_init__(self) -> None:
        self.num_records = optional_task_int(self.num_records, "num_records", low=1)
        self.num_pairs = task_int(self.num_pairs, "num_pairs")
        self.positions = task_positions(self.positions)
        self.num_positions = optional_task_int(self.num_positions, "num_positions")
        self.seed = task_int(self.seed, "seed")
        if self.data_path is None:
            if self.num_pairs < 2:
                raise TaskError(f"num_pairs must be >= 2, got {self.num_pairs}")
            self._check(self.num_pairs)
        elif not Path(self.data_path).is_file():
            raise FileNotFoundError(f"KV retrieval data file {self.data_path!r} does not exist")

    def _check(self, num_pairs: int) -> list[int]:
        count = self.num_positions if self.num_positions is not None else min(DEFAULT_NUM_POSITIONS, num_pairs)
        return pick_positions(self.positions, num_pairs, count, "key-value pairs")

    def gold_positions(self, records: Sequence[KVRecord]) -> list[int]:
        """The gold positions used for these records (validated against the shortest record)."""
        if not records:
            raise ValueError("no records")
        return self._check(min(len(r.pairs) for r in records))

    def load_records(self) -> list[KVRecord]:
        """Read the file or generate records; checks the format and the positions before returning."""
        if self.data_path is None:
            rng = random.Random(self.seed)
            records = []
            for i in range(50 if self.num_records is None else self.num_records):
                keys: set[str] = set()
                pairs = []
                while len(pairs) < self.num_pairs:
                    key = random_uuid4(rng)
                    if key not in keys:
                        keys.add(key)
                        pairs.append((key, random_uuid4(rng)))
                records.append(KVRecord(f"kv-seed{self.seed}:{i}", tuple(pairs)))
            return records
        rows = read_jsonl(self.data_path, ["ordered_kv_records"], limit=self.num_records)
        stem = Path(self.data_path).name.split(".")[0]
        records = []
        for row in rows:
            raw = row["ordered_kv_records"]
            where = f"{self.data_path}: line {row['_line']}"
            if not isinstance(raw, list) or len(raw) < 2:
                raise ValueError(f"{where}: 'ordered_kv_records' must be a list of at least 2 [key, value] pairs")
            pairs = []
            for pair in raw:
                if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
                    raise ValueError(f"{where}: 'ordered_kv_records' holds {pair!r}, not a [key, value] string pair")
                pairs.append((pair[0], pair[1]))
            if len({k for k, _ in pairs}) != len(pairs):
                raise ValueError(f"{where}: duplicate keys in 'ordered_kv_records'")
            records.append(KVRecord(f"{stem}:{row['_line'] - 1}", tuple(pairs)))
        self.gold_positions(records)
        return records

    def build_samples(self, records: Sequence[KVRecord]) -> list[Sample]:
        """For each record, one sample per gold position; all of them share the record's prefix."""
        positions = self.gold_positions(records)
        samples = []
        for record in records:
            prefix = kv_prefix(record.pairs)
            for p in positions:
                key, value = record.pairs[p]
                samples.append(
                    Sample(
                        prefix=prefix,
                        query=KV_QUERY.format(key=key),
                        answers=[value],
                        position=p,
                        record_id=record.record_id,
                        target=self.target_prefix + value,
                        alt_targets=tuple(prefix + value for prefix in self.alt_target_prefixes),
                        task=self.name,
                    )
                )
        return samples

    def is_correct(self, prediction: str, sample: Sample) -> bool:
        """The gold value appears in the answer (case-insensitive)."""
        return kv_is_correct(prediction, sample.answers[0])
