"""Multi-document question answering from Lost in the Middle (NaturalQuestions-Open with retrieved documents).

The prompt is the benchmark's::

    Write a high-quality answer for the given question using only the provided search results (some of which
    might be irrelevant).

    Document [1](Title: T1) text1
    Document [2](Title: T2) text2
    ...

    Question: q
    Answer:

The gold document is moved to each gold position among the distractors; the distractors keep their order. An
answer is correct by the benchmark's rule: the text up to the first newline, SQuAD-normalised, contains a
normalised gold answer (best-subspan exact match).

Data: ``nq-open-*.jsonl(.gz)`` lines ``{"question", "answers", "ctxs": [{"title", "text", "isgold"?, ...}]}``.
The gold document is the ctx with ``isgold`` true (or the only ctx, in the oracle file). Distractors are the
record's other ctxs in order (retrieval rank), the first ``num_documents - 1`` of them. When a record has too
few (the oracle file has none), the rest are drawn, with a per-record seed, from the gold documents of the
file's other records, skipping any that contain one of this record's normalised answers.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .base import Sample, Task, optional_task_int, pick_positions, read_jsonl, task_int, task_positions
from .registry import TaskError, register_task

QA_INSTRUCTION = (
    "Write a high-quality answer for the given question using only the provided search results "
    "(some of which might be irrelevant)."
)
QA_QUERY = "\n\nQuestion: {question}\nAnswer:"


@dataclass(frozen=True)
class Document:
    """A search result."""

    title: str
    text: str


@dataclass(frozen=True)
class QARecord:
    """A question, its gold answers, its gold document and the distractors in prompt order."""

    record_id: str
    question: str
    answers: tuple[str, ...]
    gold: Document
    distractors: tuple[Document, ...]


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation, drop articles, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def best_subspan_em(prediction: str, ground_truths: Sequence[str]) -> float:
    """1.0 when a normalised gold answer is a substring of the normalised prediction, else 0.0."""
    normalized_prediction = normalize_answer(prediction)
    for ground_truth in ground_truths:
        if normalize_answer(ground_truth) in normalized_prediction:
            return 1.0
    return 0.0


def mdqa_is_correct(prediction: str, answers: Sequence[str]) -> bool:
    """The benchmark's rule: best-subspan EM on the answer up to its first newline."""
    return best_subspan_em(prediction.split("\n")[0].strip(), answers) == 1.0


def format_documents(documents: Sequence[Document]) -> str:
    """``Document [i](Title: T) text`` lines, numbered from 1."""
    return "\n".join(f"Document [{i + 1}](Title: {d.title}) {d.text}" for i, d in enumerate(documents))


def qa_prefix(documents: Sequence[Document]) -> str:
    """Instruction and documents."""
    return f"{QA_INSTRUCTION}\n\n{format_documents(documents)}"


def qa_prompt(question: str, documents: Sequence[Document]) -> str:
    """The full benchmark prompt."""
    return qa_prefix(documents) + QA_QUERY.format(question=question)


def _document(ctx: object, where: str) -> Document:
    if not isinstance(ctx, dict):
        raise ValueError(f"{where}: a ctx is not an object")
    missing = [k for k in ("title", "text") if k not in ctx]
    if missing:
        raise ValueError(f"{where}: a ctx misses key(s) {missing}")
    return Document(str(ctx["title"]), str(ctx["text"]))


@register_task("mdqa")
@dataclass
class MDQATask(Task):
    """Multi-document QA with the gold document moved through the context."""

    display_name: ClassVar[str] = "multi-document QA"

    data_path: str = field(default="", metadata={"help": "nq-open .jsonl(.gz) file (oracle or k-document)."})
    num_records: int | None = field(default=None, metadata={"help": "Records to use (first n); None: all."})
    num_documents: int = field(default=10, metadata={"help": "Documents in the context, gold included."})
    positions: Sequence[int] | None = field(
        default=None, metadata={"help": "Gold document indices; default num_positions evenly spaced."}
    )
    num_positions: int = field(default=5, metadata={"help": "Number of default positions."})
    seed: int = field(default=0, metadata={"help": "Seed for drawing distractors from other records."})

    generation_slack = 24

    def __post_init__(self) -> None:
        self.num_records = optional_task_int(self.num_records, "num_records", low=1)
        self.num_documents = task_int(self.num_documents, "num_documents", low=1)
        self.positions = task_positions(self.positions)
        self.num_positions = task_int(self.num_positions, "num_positions")
        self.seed = task_int(self.seed, "seed")
        if not self.data_path:
            raise TaskError("mdqa needs data_path: an nq-open .jsonl(.gz) file from Lost in the Middle")
        if not Path(self.data_path).is_file():
            raise FileNotFoundError(f"multi-document QA data file {self.data_path!r} does not exist")
        self.gold_positions()

    def gold_positions(self) -> list[int]:
        """Gold document indices (validated)."""
        return pick_positions(self.positions, self.num_documents, self.num_positions, "documents")

    def load_records(self) -> list[QARecord]:
        """Read the file, find each gold document and complete the distractors (see the module docstring)."""
        rows = read_jsonl(self.data_path, ["question", "answers", "ctxs"])
        stem = Path(self.data_path).name.split(".")[0]
        parsed = []
        for row in rows:
            where = f"{self.data_path}: line {row['_line']}"
            answers = row["answers"]
            if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
                raise ValueError(f"{where}: 'answers' must be a non-empty list of strings")
            ctxs = row["ctxs"]
            if not isinstance(ctxs, list) or not ctxs:
                raise ValueError(f"{where}: 'ctxs' must be a non-empty list of documents")
            gold_index = next((i for i, c in enumerate(ctxs) if isinstance(c, dict) and c.get("isgold")), None)
            if gold_index is None:
                if len(ctxs) != 1:
                    raise ValueError(f"{where}: no ctx is marked 'isgold' and there is more than one")
                gold_index = 0
            docs = [_document(c, where) for c in ctxs]
            gold = docs.pop(gold_index)
            parsed.append((row, str(row["question"]), tuple(answers), gold, docs))

        wanted = self.num_documents - 1
        pool = [gold for _, _, _, gold, _ in parsed]
        records = []
        for index, (row, question, answers, gold, docs) in enumerate(parsed[: self.num_records]):
            distractors = docs[:wanted]
            if len(distractors) < wanted:
                normalized = [normalize_answer(a) for a in answers]
                candidates = [
                    d
                    for j, d in enumerate(pool)
                    if j != index and d != gold and not any(a and a in normalize_answer(d.text) for a in normalized)
                ]
                if len(candidates) < wanted - len(distractors):
                    raise ValueError(
                        f"{self.data_path}: line {row['_line']} needs {wanted - len(distractors)} more distractors "
                        f"but the file offers only {len(candidates)}; lower num_documents"
                    )
                rng = random.Random(f"{self.seed}:{index}")
                distractors += rng.sample(candidates, wanted - len(distractors))
            records.append(QARecord(f"{stem}:{row['_line'] - 1}", question, answers, gold, tuple(distractors)))
        return records

    def build_samples(self, records: Sequence[QARecord]) -> list[Sample]:
        """One sample per record and gold document position."""
        positions = self.gold_positions()
        samples = []
        for record in records:
            if len(record.distractors) != self.num_documents - 1:
                raise ValueError(
                    f"record {record.record_id} has {len(record.distractors)} distractors, "
                    f"expected {self.num_documents - 1}"
                )
            for p in positions:
                documents = list(record.distractors)
                documents.insert(p, record.gold)
                samples.append(
                    Sample(
                        prefix=qa_prefix(documents),
                        query=QA_QUERY.format(question=record.question),
                        answers=list(record.answers),
                        position=p,
                        record_id=record.record_id,
                        target=" " + record.answers[0],
                        task=self.name,
                    )
                )
        return samples

    def is_correct(self, prediction: str, sample: Sample) -> bool:
        """Best-subspan exact match on the first line of the answer."""
        return mdqa_is_correct(prediction, sample.answers)
