{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set streaming = cookiecutter.streaming == "yes" -%}
{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""The model: loads its weights once and computes every output from the inputs.

Replace the placeholder in ``Model.predict`` (marked ``YOUR MODEL``) with your own model and keep its
contract: numpy arrays in, one per input, and a dict of numpy arrays out, one per output,
{%- if batching %}
all with the batch axis first.
{%- else %}
all without a batch axis (batching is off).
{%- endif %}
{%- if pytorch %}

The placeholder runs a small torch module, on CUDA when available. Without torch installed
(``pip install -e ".[torch]"``) it runs the same computation on numpy and logs a warning.
{%- endif %}

The placeholder sets every output to the mean of all input values of its sample (the lengths of bytes
values count), so the service works end to end before you start.

Example::

    model = Model()
    outputs = model.predict(**spec.example_inputs({{ "batch_size=2" if batching }}))
"""

from __future__ import annotations

import logging
{%- if streaming %}
from collections.abc import Iterator
{%- endif %}

import numpy as np
from tritonrt.decorators import {{ "batch" if batching else "sample" }}
from tritonrt.model_config import Tensor

from {{ cookiecutter.package }} import spec

{%- if pytorch %}

try:
    import torch
except ImportError:  # torch is the optional extra "torch"
    torch = None
{%- endif %}

LOGGER = logging.getLogger(__name__)
{%- if streaming %}
STREAM_CHUNKS = 3  # responses the streaming model sends for each request
{%- endif %}
{%- if pytorch %}

if torch is not None:

    class SampleMean(torch.nn.Module):
        """Placeholder network: the mean of each row of a (batch, values) tensor."""

        def forward(self, rows: torch.Tensor) -> torch.Tensor:
            return rows.sum(dim=1) / max(rows.shape[1], 1)
{%- endif %}


class Model:
    """Holds the weights and serves them through the inference callables the service binds.

    ``infer``{{ " and ``infer_stream``" if streaming }} take Triton's requests; ``predict`` does the
    computation on plain numpy arrays.
    """

    def __init__(self) -> None:
        # YOUR MODEL: load the weights here. This runs once per process; all model instances share it.
{%- if pytorch %}
        self.device = "cpu"
        self.module = None
        if torch is None:
            LOGGER.warning(
                "framework=pytorch, but torch is not installed: the placeholder model runs on numpy. "
                'Install torch with: pip install -e ".[torch]"'
            )
        else:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
            self.module = SampleMean().to(self.device).eval()  # e.g. module.load_state_dict(torch.load(...))
            LOGGER.info("Model loaded on %s", self.device)
{%- else %}
        self.scale = 1.0  # stands in for real weights, e.g. np.load("weights.npy")
{%- endif %}

    def predict(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Compute every output from ``inputs`` (input name -> array); return output name -> array."""
{%- if not batching %}
        # Batching is off: the arrays hold one sample; the computation below works on batches of one.
        inputs = {name: value[np.newaxis] for name, value in inputs.items()}
{%- endif %}
        # YOUR MODEL: replace the placeholder computation below.
        rows = [_rows(inputs[spec.name_of(tensor)]) for tensor in spec.INPUTS]
{%- if pytorch %}
        if self.module is None:
            means = [row.sum(axis=1) / max(row.shape[1], 1) for row in rows]
        else:
            with torch.inference_mode():
                tensors = [torch.from_numpy(row.astype(np.float32)).to(self.device) for row in rows]
                means = [self.module(tensor).cpu().numpy() for tensor in tensors]
        level = np.mean(means, axis=0)
{%- else %}
        level = self.scale * np.mean([row.sum(axis=1) / max(row.shape[1], 1) for row in rows], axis=0)
{%- endif %}
        outputs = {spec.name_of(tensor): _filled(level, tensor) for tensor in spec.OUTPUTS}
{%- if not batching %}
        return {name: value[0] for name, value in outputs.items()}
{%- else %}
        return outputs
{%- endif %}

    @{{ "batch" if batching else "sample" }}
    def infer(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """The inference callable of ``spec.MODEL_NAME``{{ ": @batch joins the requests Triton batched" if batching else ": @sample hands it one request" }}.

        If it raises for several requests at once, tritonrt runs each of them alone once more, so that only
        the bad ones fail, each with its own error; mark it ``@no_retry`` (``tritonrt.decorators``) if it
        must not run twice on a request.
        """
        return self.predict(**inputs)
{%- if streaming %}

    @{{ "batch" if batching else "sample" }}
    def infer_stream(self, **inputs: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        """The inference callable of ``spec.STREAM_MODEL_NAME``: sends ``STREAM_CHUNKS`` responses.

        YOUR MODEL: yield partial results as they are ready (tokens, frames, refinements).
        """
        outputs = self.predict(**inputs)
        for _ in range(STREAM_CHUNKS):
            yield outputs
{%- endif %}


def _rows(array: np.ndarray) -> np.ndarray:
    """A batch as float64 rows of values, one row per sample; bytes values count by their length."""
    if array.dtype.kind in "SOU":
        array = np.vectorize(len, otypes=[np.float64])(array)
    return array.reshape(len(array), -1).astype(np.float64)


def _filled(level: np.ndarray, tensor: Tensor) -> np.ndarray:
    """An array for output ``tensor`` holding each sample's ``level`` (its -1 dimensions have size 1)."""
    shape = tuple(1 if dim == -1 else dim for dim in tensor.shape)
    values = np.broadcast_to(level.reshape(-1, *(1 for _ in shape)), (len(level), *shape))
    if tensor.dtype is np.bytes_:
        return np.char.mod("%g", values).astype(np.bytes_)
    if np.issubdtype(tensor.dtype, np.integer):
        limits = np.iinfo(tensor.dtype)
        values = np.clip(np.rint(values), limits.min, limits.max)
    return values.astype(tensor.dtype)
