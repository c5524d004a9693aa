"""The CPU-bound work of bench/cpu_bound.py's model, the same in every server: pure Python holding the GIL,
about 1 ms per row (like a tokenizer, image decoding or feature code). bench/cpu_bound.py measures the machine
once (:func:`calibrate`) and gives every server the same count in ``BENCH_ITERATIONS_PER_ROW``."""

import os
import time

ITERATIONS_PER_ROW = int(os.environ.get("BENCH_ITERATIONS_PER_ROW", "20000"))


def burn(rows: int, iterations_per_row: int = ITERATIONS_PER_ROW) -> int:
    """Spin the interpreter for ``rows`` rows of work; the result only keeps the loop from being optimised out."""
    total = 0
    for step in range(rows * iterations_per_row):
        total += step * step % 7
    return total


def calibrate(target_s: float = 1e-3, probe: int = 20000) -> int:
    """The iterations that take about ``target_s`` here (the fastest of a few probes)."""
    best = min(_timed(probe) for _ in range(20))
    return max(1, round(probe * target_s / best))


def _timed(iterations: int) -> float:
    start = time.perf_counter()
    burn(1, iterations)
    return time.perf_counter() - start
