"""Inputs read from a file, for the command-line client (``--input``) and ``make golden``.

Formats: ``.npz`` (one array per input, by input name), ``.json`` (an object: input name -> nested list;
strings for bytes inputs) and ``.npy`` (one array, for a model with a single input). The arrays hold one
sample, or {{ "several along a leading batch axis" if cookiecutter.max_batch_size | int > 0 else "(batching is off) only one" }}.

Example::

    inputs, batched = read_inputs(Path("samples.npz"))
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from {{ cookiecutter.package }} import spec

__all__ = ["FORMATS", "read_inputs"]

FORMATS = (".npz", ".json", ".npy")


def read_inputs(path: Path) -> tuple[dict[str, np.ndarray], bool]:
    """The inputs in ``path``, converted and checked (``spec.as_input``), and whether they hold a batch.

    Raises ValueError naming the file and what is wrong with it (format, missing or unknown inputs, dtype or
    shape).
    """
    try:
        values = _load(path)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: cannot read it as {path.suffix or 'a samples'} file: {error}") from error
    names = [str(tensor.name) for tensor in spec.INPUTS]
    missing, unknown = sorted(set(names) - set(values)), sorted(set(values) - set(names))
    if missing or unknown:
        found: dict[str, list[str]] = {"missing": missing, "unknown": unknown}
        problems = "; ".join(f"{kind}: {', '.join(some)}" for kind, some in found.items() if some)
        raise ValueError(f"{path}: the model's inputs are {', '.join(names)}; {problems}")
    tensors = dict(zip(names, spec.INPUTS, strict=True))
    batched = spec.BATCHING and all(
        np.ndim(values[name]) == len(tensor.shape) + 1 for name, tensor in tensors.items()
    )
    try:
        inputs = {
            name: spec.as_input(tensor, values[name], batched=batched) for name, tensor in tensors.items()
        }
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from error
    return inputs, batched


def _load(path: Path) -> dict[str, Any]:
    """The file's arrays or lists, by input name."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    if path.suffix == ".npy":
        if len(spec.INPUTS) != 1:
            raise ValueError(f"the model has {len(spec.INPUTS)} inputs: give them by name in .npz or .json")
        return {str(spec.INPUTS[0].name): np.load(path, allow_pickle=False)}
    if path.suffix == ".json":
        loaded = json.loads(path.read_text())
        if not isinstance(loaded, dict):
            raise ValueError("expected a JSON object: input name -> values")
        return loaded
    raise ValueError(f"unknown format; use one of {', '.join(FORMATS)}")
