"""Each model instance's thread budget: how many threads the model's math libraries may start.

OpenMP (scikit-learn, torch, ...), MKL and OpenBLAS (numpy, scipy) start a thread per core by default, in
every instance. Beside Triton's own threads, the other instances and a load generator on the same cores they
oversubscribe the machine, and the latency spikes: scikit-learn's OpenMP threads took a service's p95 from a
few ms to seconds on two cores. So each instance gets ``THREADS`` threads (default 1, the
``OMP_NUM_THREADS=1`` that Triton Python backend and TorchServe deployments commonly set per worker), and the
service spreads its work over the cores with instances instead (``INSTANCES``, ``WORKERS``; ``make tune``
finds how many). Raise ``THREADS`` for a model that runs few instances on large batches that a library can
split over cores (a big matrix product on the CPU).

The libraries read these variables once, when they load: ``python -m {{ cookiecutter.package }}`` calls
``limit()`` before anything imports numpy. A variable already set in the environment wins for its library
(``OMP_NUM_THREADS=4 python -m {{ cookiecutter.package }}``).

Example::

    limit({})  # {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from {{ cookiecutter.package }}.settings import SettingsError, threads_of

__all__ = ["VARIABLES", "budget", "limit"]

# The thread counts of OpenMP, Intel's MKL and OpenBLAS (torch's intra-op threads follow OMP_NUM_THREADS).
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def budget(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set: each of ``VARIABLES`` that ``environ`` leaves unset, at ``THREADS``.

    Empty when ``THREADS`` is not valid: ``Settings.from_env`` then stops the service with the reason."""
    try:
        threads = threads_of(environ)
    except SettingsError:
        return {}
    return {name: str(threads) for name in VARIABLES if not environ.get(name, "").strip()}


def limit(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the thread budget in ``environ`` (default: this process's environment); return what was set."""
    environ = os.environ if environ is None else environ
    chosen = budget(environ)
    environ.update(chosen)
    return chosen
