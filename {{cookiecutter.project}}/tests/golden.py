"""Record golden samples from the model run in process: ``make golden`` (``SAMPLES=<file>`` for your inputs).

Run it once your model is in and its answers are checked (against your notebook or your evaluation), and
commit ``tests/golden/samples.npz``: ``test_golden.py`` then checks that the model, and the service over
HTTP and gRPC, still give these answers (within the tolerances of ``conftest.TOLERANCES``) after every change
of code, dependencies or image. Without ``SAMPLES`` the inputs are the spec's examples.

Usage::

    python tests/golden.py [--input samples.npz|.json|.npy]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.samples import FORMATS, read_inputs

__all__ = ["GOLDEN", "load", "record"]

GOLDEN = Path(__file__).resolve().parent / "golden" / "samples.npz"
EXAMPLES = {{ "min(4, spec.MAX_BATCH_SIZE)" if cookiecutter.max_batch_size | int > 0 else "None" }}  # samples recorded without --input


def record(inputs: dict[str, np.ndarray], path: Path = GOLDEN) -> dict[str, np.ndarray]:
    """Run the model on ``inputs`` and save inputs and outputs to ``path``; return the outputs."""
    outputs = Model().predict(**inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"input.{name}": _plain(value) for name, value in inputs.items()}
    arrays.update({f"output.{name}": _plain(value) for name, value in outputs.items()})
    np.savez(path, **arrays)
    return outputs


def _plain(array: np.ndarray) -> np.ndarray:
    """``array`` without Python objects (bytes values as a bytes array), so it loads without pickle."""
    return array.astype(np.bytes_) if array.dtype == object else array


def load(path: Path = GOLDEN) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The recorded inputs and outputs, each by tensor name."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return _named(arrays, "input."), _named(arrays, "output.")


def _named(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {name.removeprefix(prefix): value for name, value in arrays.items() if name.startswith(prefix)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, help=f"the inputs to record ({', '.join(FORMATS)})")
    args = parser.parse_args(argv)
    if args.input is None:
        inputs = spec.example_inputs(EXAMPLES)
    else:
        try:
            inputs, batched = read_inputs(args.input)
        except ValueError as error:
            parser.error(str(error))
{%- if cookiecutter.max_batch_size | int > 0 %}
        if not batched:  # golden samples are a batch
            inputs = {name: value[np.newaxis] for name, value in inputs.items()}
{%- endif %}
    outputs = record(inputs)
    count = len(next(iter(outputs.values()))) if spec.BATCHING else 1
    print(f"Recorded {count} sample(s) in {GOLDEN}: commit it; test_golden.py checks the model against it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
