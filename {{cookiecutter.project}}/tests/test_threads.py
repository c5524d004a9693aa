"""The thread budget: the model's math libraries load with ``THREADS`` threads an instance (threads.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import PACKAGE, PROJECT_DIR

from {{ cookiecutter.package }}.settings import PREFIX
from {{ cookiecutter.package }}.threads import VARIABLES, budget, limit

__all__: list[str] = []

# The service's imports, watched: the thread variables as they are when numpy first loads.
WATCH_NUMPY = (
    "import builtins, json, os\n"
    "seen = dict()\n"
    "original = builtins.__import__\n"
    "def watch(name, *args, **kwargs):\n"
    "    if name.split('.')[0] == 'numpy' and not seen:\n"
    f"        seen.update((variable, os.environ.get(variable)) for variable in {VARIABLES!r})\n"
    "    return original(name, *args, **kwargs)\n"
    "builtins.__import__ = watch\n"
    f"import {PACKAGE}.__main__\n"
    "print(json.dumps(seen))\n"
)


def environment(**variables: str) -> dict[str, str]:
    """This environment without any thread variable, with ``variables`` (THREADS with the prefix)."""
    unset = (*VARIABLES, PREFIX + "THREADS")
    cleared = {name: value for name, value in os.environ.items() if name not in unset}
    named = {(PREFIX + name if name == "THREADS" else name): value for name, value in variables.items()}
    return cleared | named


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, {name: "1" for name in VARIABLES}),
        ({"THREADS": "3"}, {name: "3" for name in VARIABLES}),
        ({"OMP_NUM_THREADS": "2"}, {name: "2" if name == "OMP_NUM_THREADS" else "1" for name in VARIABLES}),
    ],
)
def test_the_libraries_load_within_the_budget(variables: dict[str, str], expected: dict[str, str]) -> None:
    # OpenMP, MKL and OpenBLAS read their thread counts once, when they load: the budget is set before numpy.
    command = [sys.executable, "-c", WATCH_NUMPY]
    env = environment(**variables)
    result = subprocess.run(command, env=env, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == expected


def test_a_variable_set_by_hand_wins_and_a_bad_budget_sets_nothing() -> None:
    by_hand = {"MKL_NUM_THREADS": "8", PREFIX + "THREADS": "2"}
    assert budget(by_hand) == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    assert budget({PREFIX + "THREADS": "none"}) == {}  # Settings.from_env stops the service, naming it
    environ = {"OPENBLAS_NUM_THREADS": " "}
    assert limit(environ) == {name: "1" for name in VARIABLES}
    assert environ == {name: "1" for name in VARIABLES}
