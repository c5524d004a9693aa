{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set streaming = cookiecutter.streaming == "yes" -%}
{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""The model: loads its weights once and computes every output from the inputs.

Its contract, which the service, the client and the tests rely on: ``Model.predict`` takes numpy arrays, one
per input of ``spec.py``, and returns a dict of numpy arrays, one per output,
{%- if batching %}
all with the batch axis first.
{%- else %}
all without a batch axis (batching is off).
{%- endif %}

The weights are loaded once, in ``Model.__init__``, from the package's ``weights/`` folder (packaged into
the wheel and the image) or from the directory ``{{ cookiecutter.package | upper }}_MODEL_DIR`` names:
``model_file(name)`` finds them (``model_files.py``).

YOUR MODEL: until you swap yours in (README, "Swapping in your model"), a placeholder serves: it sets every
output to the mean of all input values of its sample (``placeholder.py``, ``weights/placeholder.json``), so
the service works end to end before you start.
{%- if pytorch %} It runs a small torch module, on CUDA when
available; without torch installed (``pip install -e ".[torch]"``) it runs the same computation on numpy
and logs a warning.
{%- endif %}
Replace the code marked ``YOUR MODEL``, delete ``placeholder.py``, and replace this paragraph with what your
model is: its name, where it was trained, its files in ``weights/``.

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
from tritonrt.metrics import Histogram

from {{ cookiecutter.package }} import (
    placeholder,  # YOUR MODEL: delete with placeholder.py
    spec,
)
from {{ cookiecutter.package }}.model_files import model_file

{%- if pytorch %}

try:
    import torch
except ImportError:  # torch is the optional extra "torch"
    torch = None
{%- endif %}

LOGGER = logging.getLogger(__name__)
# The model's own metric (tritonrt.metrics: Counter, Gauge, Histogram), published on the metrics port
# beside Triton's, read by the dashboard's "Model: predict time" panel. YOUR MODEL: keep, add or delete.
PREDICT_SECONDS = Histogram(
    "{{ cookiecutter.package }}_predict_seconds",
    "Seconds Model.predict takes per call (a batch)",
    ("model",),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
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

    def __init__(self{{ ", device: str | None = None" if pytorch }}) -> None:
{%- if pytorch %}
        # YOUR MODEL: load the weights here (files in weights/, found by model_file). With worker threads
        # this runs once and every instance shares it; with worker processes (the default) it runs in each
        # worker, on that worker's GPU (``device``).
{%- else %}
        # YOUR MODEL: load the weights here, e.g. np.load(model_file("model.npz")). This runs once, before the
        # worker processes (if any) are forked: every instance shares it (copy on write).
{%- endif %}
        weights = model_file(placeholder.WEIGHTS_FILE)
        self.scale = placeholder.load_scale(weights)
{%- if pytorch %}
        self.device = "cpu"
        self.module = None
        if torch is None:
            LOGGER.warning(
                "framework=pytorch, but torch is not installed: the placeholder model runs on numpy. "
                'Install torch with: pip install -e ".[torch]"'
            )
        else:
            self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            # e.g. module.load_state_dict(torch.load(model_file("model.pt"), map_location=self.device))
            self.module = SampleMean().to(self.device).eval()
{%- endif %}
        LOGGER.info("Model loaded from %s{{ " on %s" if pytorch }}", weights.parent{{ ", self.device" if pytorch }})

    def predict(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Compute every output from ``inputs`` (input name -> array); return output name -> array."""
{%- if not batching %}
        # Batching is off: the arrays hold one sample; the computation below works on batches of one.
        inputs = {name: value[np.newaxis] for name, value in inputs.items()}
{%- endif %}
        # YOUR MODEL: replace the placeholder computation below.
{%- if pytorch %}
        if self.module is None:
            levels = placeholder.level(inputs, self.scale)
        else:
            with torch.inference_mode():
                rows = [torch.from_numpy(row).to(self.device) for row in placeholder.rows(inputs)]
                means = [self.module(row).cpu().numpy() for row in rows]
            levels = self.scale * np.mean(means, axis=0)
{%- else %}
        levels = placeholder.level(inputs, self.scale)
{%- endif %}
        outputs = placeholder.outputs(levels)
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
        with PREDICT_SECONDS.labels(spec.MODEL_NAME).time():
            return self.predict(**inputs)
{%- if streaming %}

    @{{ "batch" if batching else "sample" }}
    def infer_stream(self, **inputs: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        """The inference callable of ``spec.STREAM_MODEL_NAME``: sends ``STREAM_CHUNKS`` responses.

        YOUR MODEL: yield partial results as they are ready (tokens, frames, refinements).
        """
        with PREDICT_SECONDS.labels(spec.STREAM_MODEL_NAME).time():
            outputs = self.predict(**inputs)
        for _ in range(STREAM_CHUNKS):
            yield outputs
{%- endif %}
