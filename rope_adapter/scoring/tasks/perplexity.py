"""Language-modelling guard: log-likelihood of windows of a plain text file.

Each window is one sample whose whole text is the teacher-forced target (empty prefix and query), so
``gold_logprob(..., k=None)`` is the mean token log-likelihood and ``exp(-mean)`` the perplexity. Use it next to
a retrieval task to keep a factor search from buying position robustness with general quality.

Windows are cut at token boundaries when ``window_tokens`` and a tokenizer are given (re-tokenising a window
gives about, not exactly, ``window_tokens`` tokens); otherwise at whitespace, ``window_chars`` characters long.
The sample ``position`` is the window index. There is no greedy answer rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .base import Sample, Task, optional_task_int, task_int
from .registry import TaskError, register_task


@dataclass(frozen=True)
class TextWindow:
    """A slice of the text file."""

    record_id: str
    text: str


def char_windows(text: str, window_chars: int, stride_chars: int | None = None) -> list[str]:
    """Windows of at most ``window_chars`` characters, cut at spaces where possible.

    Without ``stride_chars`` a window starts where the previous one ended (the windows tile the text); with it,
    windows start every ``stride_chars`` characters, moved forward to the next space.
    """
    windows = []
    start = 0
    while start < len(text):
        end = min(len(text), start + window_chars)
        if end < len(text):
            cut = text.rfind(" ", start + 1, end + 1)
            end = cut if cut > start else end
        window = text[start:end].strip()
        if window:
            windows.append(window)
        if end >= len(text):
            break
        if stride_chars is None:
            start = end
        else:
            nxt = start + stride_chars
            space = text.find(" ", nxt - 1)
            start = space + 1 if 0 <= space < nxt + window_chars else nxt
    return windows


def token_windows(text: str, tokenizer: Any, window_tokens: int, stride_tokens: int) -> list[str]:
    """Windows of ``window_tokens`` tokens every ``stride_tokens``, cut at token offsets (fast tokenizers)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    windows = []
    for start in range(0, len(offsets), stride_tokens):
        chunk = offsets[start : start + window_tokens]
        window = text[chunk[0][0] : chunk[-1][1]].strip()
        if window:
            windows.append(window)
        if start + window_tokens >= len(offsets):
            break
    return windows


@register_task("perplexity")
@dataclass
class PerplexityTask(Task):
    """Windows of a UTF-8 text file, scored by teacher-forced log-likelihood."""

    display_name: ClassVar[str] = "perplexity"
    position_sweep: ClassVar[bool] = False

    data_path: str = field(default="", metadata={"help": "UTF-8 text file."})
    window_chars: int = field(default=2048, metadata={"help": "Window length in characters (no tokenizer)."})
    window_tokens: int | None = field(
        default=None, metadata={"help": "Window length in tokens (needs tokenizer); overrides window_chars."}
    )
    stride: int | None = field(
        default=None, metadata={"help": "Start-to-start distance in the window's unit; default: no overlap."}
    )
    num_windows: int | None = field(default=None, metadata={"help": "Keep the first n windows; None: all."})
    tokenizer: Any = field(default=None, repr=False, metadata={"help": "Tokenizer for token windows."})

    supports_generation = False

    def __post_init__(self) -> None:
        self.window_chars = task_int(self.window_chars, "window_chars")
        self.window_tokens = optional_task_int(self.window_tokens, "window_tokens")
        self.stride = optional_task_int(self.stride, "stride", low=1)
        self.num_windows = optional_task_int(self.num_windows, "num_windows", low=1)
        if not self.data_path:
            raise TaskError("perplexity needs data_path: a UTF-8 text file")
        if not Path(self.data_path).is_file():
            raise FileNotFoundError(f"text file {self.data_path!r} does not exist")
        if self.window_tokens is not None:
            if self.tokenizer is None:
                raise TaskError("window_tokens needs a tokenizer; pass tokenizer= or use window_chars")
            if self.window_tokens < 2:
                raise TaskError(f"window_tokens must be >= 2, got {self.window_tokens}")
        elif self.window_chars < 2:
            raise TaskError(f"window_chars must be >= 2, got {self.window_chars}")

    def load_records(self) -> list[TextWindow]:
        """Read the file and cut it into windows."""
        try:
            text = Path(self.data_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"cannot read text file {self.data_path!r}: {err}") from err
        if not text.strip():
            raise ValueError(f"text file {self.data_path!r} is empty")
        if self.window_tokens is not None:
            windows = token_windows(text, self.tokenizer, self.window_tokens, self.stride or self.window_tokens)
        else:
            windows = char_windows(text, self.window_chars, self.stride)
        stem = Path(self.data_path).name.split(".")[0]
        return [TextWindow(f"{stem}:{i}", w) for i, w in enumerate(windows[: self.num_windows])]

    def build_samples(self, records: Sequence[TextWindow]) -> list[Sample]:
        """One sample per window; the window is the target."""
        return [
            Sample(prefix="", query="", answers=[], position=i, record_id=r.record_id, target=r.text, task=self.name)
            for i, r in enumerate(records)
        ]
