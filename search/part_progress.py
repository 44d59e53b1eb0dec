"""Progress over the parts of a long scoring phase (the confirmation and held-out records): a tqdm bar, or, with
the bar off (``--no-progress``: output to a log file), one log line per finished part."""

from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


class PartProgress:
    """``update()`` once a part is scored; ``close()`` at the end."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = tqdm(total=total, desc=desc, unit="part", disable=not enabled, file=sys.stderr)
        self.enabled, self.total, self.desc = enabled, total, desc
        self.done = 0
        self.start = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.done += n
        if not self.enabled:
            elapsed = time.monotonic() - self.start
            logger.info("%s: %d of %d parts scored (%.0f s)", self.desc, self.done, self.total, elapsed)

    def close(self) -> None:
        self.bar.close()
