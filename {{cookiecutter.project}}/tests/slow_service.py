"""The service with a slow model, so that requests queue: ``python tests/slow_service.py``.

Runs ``python -m {{ cookiecutter.package }}`` unchanged, except that every batch takes
``SLOW_SERVICE_BATCH_S`` seconds (default 0.1) longer, and, with ``SLOW_SERVICE_MARKS`` set to a file, adds
a line to that file as each batch begins. The monitoring tests overload it to see Triton's queue time, and the
autoscaler's signal, rise; the stopping tests stop it while a request is in the model.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from {{ cookiecutter.package }} import model, service

_DELAY_S = float(os.environ.get("SLOW_SERVICE_BATCH_S", "0.1"))
_MARKS = os.environ.get("SLOW_SERVICE_MARKS")
_predict: Callable[..., dict[str, np.ndarray]] = model.Model.predict  # (any signature: see below)


def _slow_predict(self: model.Model, *args: np.ndarray, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    # (positional and keyword inputs alike: a swapped-in model's predict may take either)
    if _MARKS:
        with open(_MARKS, "a") as marks:
            marks.write("batch\n")
    time.sleep(_DELAY_S)
    return _predict(self, *args, **inputs)


if __name__ == "__main__":
    model.Model.predict = _slow_predict
    sys.exit(service.main())
