"""Request payloads for a model: seeded random tensors from its spec, or user samples (.npy/.npz).

Example::

    inputs = random_inputs(spec, batch_size=2, seed=0, dynamic_dim=4)
    requests = load_samples("samples/", spec)   # one dict of input arrays per request
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from loadtests.errors import LoadTestSetupError
from loadtests.model_spec import ModelSpec, TensorSpec

Payload = dict[str, np.ndarray]

_LETTERS = np.frombuffer(string.ascii_lowercase.encode(), dtype=np.uint8)
_BYTES_LENGTH = 8


def random_inputs(spec: ModelSpec, batch_size: int, seed: int, dynamic_dim: int) -> Payload:
    """One request's inputs: random values of each input's dtype and shape; ``-1`` dims become ``dynamic_dim``."""
    if spec.batched and not 1 <= batch_size <= spec.max_batch_size:
        raise LoadTestSetupError(
            f"batch_size {batch_size} does not fit model '{spec.name}' (max_batch_size "
            f"{spec.max_batch_size}); set batch_size between 1 and {spec.max_batch_size} on the user class"
        )
    if dynamic_dim < 1:
        raise LoadTestSetupError(f"dynamic_dim must be >= 1, got {dynamic_dim}")
    rng = np.random.default_rng(seed)
    payload: Payload = {}
    for tensor in spec.inputs:
        shape = tuple(dynamic_dim if d < 0 else d for d in tensor.dims)
        if spec.batched:
            shape = (batch_size, *shape)
        payload[tensor.name] = _random_array(rng, tensor, shape)
    return payload


def _random_array(rng: np.random.Generator, tensor: TensorSpec, shape: tuple[int, ...]) -> np.ndarray:
    dtype = tensor.numpy_dtype
    if tensor.datatype == "BYTES":
        letters = rng.choice(_LETTERS, size=(*shape, _BYTES_LENGTH))
        flat = [row.tobytes() for row in letters.reshape(-1, _BYTES_LENGTH)]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def load_samples(folder: str | Path, spec: ModelSpec) -> list[Payload]:
    """Requests from ``folder``: each ``*.npz`` is one request (keys are input names); ``<input>.npy`` files
    together make one more request. A batching model's arrays may leave out the batch axis (one is added).

    ``folder`` may also be one ``.npz`` file: for a batching model whose arrays there hold several samples
    along the batch axis, each sample is one request; otherwise the file is one request.
    """
    root = Path(folder)
    if root.is_file() and root.suffix == ".npz":
        return _requests_of_file(root, spec)
    if not root.is_dir():
        raise LoadTestSetupError(
            f"samples folder {root} does not exist; pass a folder of .npy/.npz files, or one .npz file"
        )
    requests: list[tuple[str, Payload]] = []
    for path in sorted(root.glob("*.npz")):
        requests.append((path.name, _read(path)))
    npy_files = sorted(root.glob("*.npy"))
    if npy_files:
        requests.append(("*.npy", {p.stem: _read(p)[p.stem] for p in npy_files}))
    if not requests:
        raise LoadTestSetupError(
            f"samples folder {root} holds no .npz or .npy files; save requests with "
            "np.savez('sample.npz', <input>=array) or one np.save('<input>.npy', array) per input"
        )
    return [_checked_sample(source, arrays, spec) for source, arrays in requests]


def _requests_of_file(path: Path, spec: ModelSpec) -> list[Payload]:
    """One request per sample of a batching model's file of batches; else the file as one request."""
    arrays = _read(path)
    known = {t.name: t for t in spec.inputs}
    batches = spec.batched and all(
        name in known and array.ndim == len(known[name].dims) + 1 for name, array in arrays.items()
    )
    counts = {len(array) for array in arrays.values()}
    if not batches or len(counts) != 1:
        return [_checked_sample(path.name, arrays, spec)]
    (count,) = counts
    return [
        _checked_sample(f"{path.name}[{row}]", {name: array[row : row + 1] for name, array in arrays.items()}, spec)
        for row in range(count)
    ]


def _read(path: Path) -> Payload:
    """The arrays in one .npz file, or ``{stem: array}`` for one .npy file."""
    try:
        if path.suffix == ".npy":
            return {path.stem: np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except ValueError as error:  # object arrays need pickle, which samples must not use
        raise LoadTestSetupError(
            f"sample {path} cannot be read without pickle ({error}); save text or bytes inputs as "
            "fixed-width arrays, e.g. np.array([b'a', b'bc'], dtype='S')"
        ) from error


def _checked_sample(source: str, arrays: Payload, spec: ModelSpec) -> Payload:
    known = {t.name: t for t in spec.inputs}
    unknown = sorted(set(arrays) - set(known))
    if unknown:
        raise LoadTestSetupError(
            f"sample {source}: {', '.join(unknown)} is not an input of model '{spec.name}'; "
            f"its inputs are {', '.join(known)}"
        )
    missing = [t.name for t in spec.inputs if not t.optional and t.name not in arrays]
    if missing:
        raise LoadTestSetupError(f"sample {source}: required input(s) {', '.join(missing)} missing")
    return {name: _checked_array(source, known[name], array, spec) for name, array in arrays.items()}


def _checked_array(source: str, tensor: TensorSpec, array: np.ndarray, spec: ModelSpec) -> np.ndarray:
    where = f"sample {source}: input '{tensor.name}'"
    if tensor.datatype == "BYTES":
        if array.dtype.kind not in "SUO":
            raise LoadTestSetupError(f"{where} is {array.dtype}, the model takes BYTES; save bytes or str arrays")
        array = array.astype(object) if array.dtype.kind == "S" else array
        if array.dtype.kind == "U":
            array = np.vectorize(lambda s: s.encode(), otypes=[object])(array)
    elif array.dtype != tensor.numpy_dtype:
        raise LoadTestSetupError(
            f"{where} is {array.dtype}, the model takes {tensor.datatype} ({tensor.numpy_dtype}); "
            f"save it with array.astype(np.{tensor.numpy_dtype})"
        )
    if spec.batched and array.ndim == len(tensor.dims):
        array = array[np.newaxis, ...]
    expected = (-1, *tensor.dims) if spec.batched else tensor.dims
    fits = array.ndim == len(expected) and all(e < 0 or e == a for e, a in zip(expected, array.shape, strict=True))
    if not fits:
        raise LoadTestSetupError(f"{where} has shape {list(array.shape)}, the model takes {list(expected)}")
    if spec.batched and array.shape[0] > spec.max_batch_size:
        raise LoadTestSetupError(
            f"{where} holds a batch of {array.shape[0]}, more than the model's max_batch_size {spec.max_batch_size}"
        )
    return array
