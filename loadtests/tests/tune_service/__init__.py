"""A small service for the tuner's real run: ``python -m loadtests.tests.tune_service``.

Model ``tuned``: each batch costs ``BATCH_COST_S`` plus ``ROW_COST_S`` per row (sleeps), so batching must win:
one request at a time serves about 24 per second, batches of 8 about 160. With ``TUNE_SERVICE_CPU_MS_PER_ROW``
set, each row costs that many milliseconds of pure Python instead (the GIL held, nothing per batch), so that
only more instances in worker processes serve more. It reads what a generated service reads:
``TUNE_SERVICE_{HTTP,GRPC,METRICS}_PORT``, ``TUNE_SERVICE_EXIT_TIMEOUT_S``, ``TUNE_SERVICE_WORKERS`` (thread or
process), ``TUNE_SERVICE_ACCESS_TOKEN`` (model control's: the tuner reloads the model with it) and the tuning
file named by ``TUNE_SERVICE_TUNING_FILE`` (absent: max_batch_size 1, no queue delay, one instance); it stops
on SIGTERM.
"""

from __future__ import annotations

__all__ = ["BATCH_COST_S", "MODEL_NAME", "ROW_COST_S"]

MODEL_NAME = "tuned"
BATCH_COST_S = 0.04
ROW_COST_S = 0.001
