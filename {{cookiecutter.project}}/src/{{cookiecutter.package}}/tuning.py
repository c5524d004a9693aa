"""The service's tuned batching and instance settings: ``tuning.json`` next to this file, written by
``make tune APPLY=1``. Without the file (or a key of it) the defaults apply: ``spec.MAX_BATCH_SIZE`` as
generated, and the defaults of ``settings.py``.

Keys: ``max_batch_size`` (the largest batch the dynamic batcher forms), ``max_queue_delay_us`` and
``instances`` (the defaults of ``{{ cookiecutter.package | upper }}_MAX_QUEUE_DELAY_US`` and
``{{ cookiecutter.package | upper }}_INSTANCES``, which still win when set), ``preferred_batch_sizes``
(batch sizes the batcher sends as soon as it has them) and ``workers`` (``thread`` or ``process``: the
default of the ``WORKERS`` setting). ``{{ cookiecutter.package | upper }}_TUNING_FILE`` names another file:
``make tune`` serves each candidate setting that way.

Example::

    tuned = load({"{{ cookiecutter.package | upper }}_TUNING_FILE": "/tmp/candidate.json"})
    tuned.max_batch_size  # 32, or None when the file does not set it
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_PATH", "FILE_VARIABLE", "WORKER_MODES", "Tuning", "TuningError", "load"]

DEFAULT_PATH = Path(__file__).with_name("tuning.json")
FILE_VARIABLE = "{{ cookiecutter.package | upper }}_TUNING_FILE"
WORKER_MODES = ("thread", "process")


class TuningError(ValueError):
    """The tuning file cannot be used; the message names the file, the key and what it must be."""


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The tuned settings; None (or empty) where the file does not set one."""

    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int | None = None
    workers: str | None = None


def load(environ: Mapping[str, str] | None = None) -> Tuning:
    """The tuning in the file ``FILE_VARIABLE`` names, else in ``tuning.json`` here.

    An absent ``tuning.json`` or an empty file (e.g. ``/dev/null``: no tuning) gives ``Tuning()``; an absent
    named file, bad JSON or a bad value raises TuningError.
    """
    environ = os.environ if environ is None else environ
    named = environ.get(FILE_VARIABLE, "").strip()
    path = Path(named) if named else DEFAULT_PATH
    if not path.exists():
        if named:
            raise TuningError(f"{FILE_VARIABLE}={named}: no such file; unset it or name a tuning file.")
        return Tuning()
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return Tuning()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TuningError(f"{path}: not valid JSON ({error}); fix it or delete it.") from None
    if not isinstance(document, dict):
        raise TuningError(f"{path}: must hold a JSON object of settings (see tuning.py); fix or delete it.")
    unknown = sorted(set(document) - {field.name for field in dataclasses.fields(Tuning)})
    if unknown:
        raise TuningError(f"{path}: unknown key(s) {', '.join(unknown)}; the keys are Tuning's fields.")
    preferred = document.get("preferred_batch_sizes", [])
    if not isinstance(preferred, list) or not all(_is_whole(size) and size >= 1 for size in preferred):
        raise TuningError(f"{path}: preferred_batch_sizes must list whole numbers >= 1, got {preferred!r}.")
    workers = document.get("workers")
    if workers is not None and workers not in WORKER_MODES:
        raise TuningError(f"{path}: workers must be one of {', '.join(WORKER_MODES)}, got {workers!r}.")
    return Tuning(
        max_batch_size=_whole(path, document, "max_batch_size", 1, 1 << 30),
        max_queue_delay_us=_whole(path, document, "max_queue_delay_us", 0, 10_000_000),
        preferred_batch_sizes=tuple(preferred),
        instances=_whole(path, document, "instances", 1, 64),
        workers=workers,
    )


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _whole(path: Path, document: dict[str, Any], key: str, low: int, high: int) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if not _is_whole(value) or not low <= value <= high:
        raise TuningError(f"{path}: {key} must be a whole number from {low} to {high}, got {value!r}.")
    return int(value)
