"""Where a run's wall-clock goes: training steps against everything the harness adds.

The split lands in ``result.json`` as ``time_s`` (seconds per phase, summed over
restarts), so the harness overhead of a grid (benchmarks/RESULTS.md) is read off
its run folders instead of guessed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = ("setup", "data", "step", "log", "eval", "checkpoint", "finetune")


class Stopwatch:
    """Accumulates wall-clock seconds per phase: ``with watch("eval"): ...``."""

    def __init__(self, previous: dict[str, float] | None = None) -> None:
        self.totals = dict.fromkeys(PHASES, 0.0) | dict(previous or {})

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        if phase not in self.totals:
            raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - start
