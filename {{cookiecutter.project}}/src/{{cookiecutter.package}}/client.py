{%- set inputs = cookiecutter.inputs | tensors("inputs") -%}
{%- set outputs = cookiecutter.outputs | tensors("outputs") -%}
{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set streaming = cookiecutter.streaming == "yes" -%}
{%- macro parameters() %}
        self,
        *,
{%- for tensor in inputs %}
        {{ tensor.name }}: ArrayLike,
{%- endfor %}
{%- endmacro -%}
{%- macro arguments(batched) %}
        Args:
{%- for tensor in inputs %}
            {{ tensor.name }}: {{ tensor.dtype }}, shape {{ tensor.shape_text(batched) }}.
{%- endfor %}
{%- endmacro -%}
"""The typed client of the model, and a command line that sends it an example request or a file's inputs.

The URL's scheme picks the protocol: ``http://host:8000`` or ``grpc://host:8001``.

Example::

    from {{ cookiecutter.package }} import spec
    from {{ cookiecutter.package }}.client import Client

    with Client("http://localhost:8000") as client:
        prediction = client.predict(**spec.example_inputs())
        print(prediction.{{ outputs[0].name }})

Command line::

    python -m {{ cookiecutter.package }}.client --url grpc://localhost:8001
    python -m {{ cookiecutter.package }}.client --input samples.npz  # or .json, .npy

Before its first request the client waits for the model to be ready (``init_timeout_s``) and says so on
the ``tritonrt.client`` logger (the command line prints it): a model still loading is waited for, but where
nothing listens at the URL at all it gives up after ``unreachable_timeout_s`` (3 s).

A service started with ``{{ cookiecutter.package | upper }}_REQUIRE_TOKEN=true`` needs its access token:
``Client(url, access_token=...)``; the command line reads it from the variable
``{{ cookiecutter.package | upper }}_ACCESS_TOKEN`` (not from an argument, which any local user could read
with ``ps``).
"""

from __future__ import annotations

import argparse
{%- if batching %}
import asyncio
{%- endif %}
import dataclasses
import logging
import os
import sys
{%- if streaming %}
from collections.abc import AsyncIterator, Iterator
{%- endif %}
{%- if batching %}
from concurrent.futures import ThreadPoolExecutor
{%- endif %}
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from tritonrt.client import {{ "AsyncioDecoupledModelClient, " if streaming }}AsyncioModelClient{{ ", DecoupledModelClient" if streaming }}, ModelClient
from tritonrt.client.exceptions import (
    PyTritonClientError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.samples import FORMATS, read_inputs

DEFAULT_URL = "http://localhost:8000"
TOKEN_VARIABLE = "{{ cookiecutter.package | upper }}_ACCESS_TOKEN"
# Where nothing listens at the URL (every connection refused), the client gives up after this long instead of
# waiting init_timeout_s: a server that is not there is not a model still loading.
UNREACHABLE_TIMEOUT_S = 3.0
{%- if batching %}
# predict_batch sends more samples than spec.MAX_BATCH_SIZE in batches of that size, this many at once.
PARALLEL_BATCHES = 4
{%- endif %}


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The model's outputs, one field per output{{ " (batch-first from ``predict_batch``)" if batching }}."""
{% for tensor in outputs %}
    {{ tensor.name }}: np.ndarray
{%- endfor %}


class Client:
    """Calls the model over HTTP or gRPC; one client may be shared by many threads.

    ``init_timeout_s`` bounds the wait for the server and model to be ready (before the first request),
    ``inference_timeout_s`` the wait for each response; ``unreachable_timeout_s`` ends that wait early where
    nothing listens at ``url`` (None: wait ``init_timeout_s`` for a server to start there);
    ``access_token`` is sent with every request (needed when the service requires it).

    Example::

        with Client("grpc://localhost:8001", inference_timeout_s=5) as client:
            prediction = client.predict(**spec.example_inputs())
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        init_timeout_s: float = 60.0,
        inference_timeout_s: float = 60.0,
        unreachable_timeout_s: float | None = UNREACHABLE_TIMEOUT_S,
        access_token: str | None = None,
    ) -> None:
        self.url = url
        self._options: dict[str, Any] = {
            "init_timeout_s": init_timeout_s,
            "inference_timeout_s": inference_timeout_s,
            "unreachable_timeout_s": unreachable_timeout_s,
            "access_token": access_token,
        }
        self._client = ModelClient(url, spec.MODEL_NAME, **self._options)
{%- if streaming %}
        self._stream_client: DecoupledModelClient | None = None
{%- endif %}

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the client cannot be used afterwards."""
        self._client.close()
{%- if streaming %}
        if self._stream_client is not None:
            self._stream_client.close()
{%- endif %}

    def predict({{ parameters() }}
    ) -> Prediction:
        """Send one sample; return its outputs.
{{ arguments(false) }}
        """
        return _prediction(self._client.infer_sample(**_inputs(locals(), batched=False)))
{%- if batching %}

    def predict_batch({{ parameters() }}
    ) -> Prediction:
        """Send a batch of samples (the first axis); return their outputs, in order.

        More than ``spec.MAX_BATCH_SIZE`` samples go in batches of that size, ``PARALLEL_BATCHES`` at once.
{{ arguments(true) }}
        """
        chunks = _chunks(_inputs(locals(), batched=True))
        if len(chunks) == 1:
            return _prediction(self._client.infer_batch(**chunks[0]))
        with ThreadPoolExecutor(max_workers=min(PARALLEL_BATCHES, len(chunks))) as pool:
            return _joined(list(pool.map(lambda chunk: self._client.infer_batch(**chunk), chunks)))
{%- endif %}
{%- if streaming %}

    def stream({{ parameters() }}
    ) -> Iterator[Prediction]:
        """Send one sample to the streaming model (gRPC only); iterate its responses as they arrive.
{{ arguments(false) }}
        """
        if self._stream_client is None:
            self._stream_client = DecoupledModelClient(self.url, spec.STREAM_MODEL_NAME, **self._options)
        responses = self._stream_client.infer_sample(**_inputs(locals(), batched=False))
        return (_prediction(outputs) for outputs in responses)
{%- endif %}


class AsyncClient:
    """The asyncio twin of ``Client``: the same methods, as coroutines.

    Example::

        async with AsyncClient("http://localhost:8000") as client:
            prediction = await client.predict(**spec.example_inputs())
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        init_timeout_s: float = 60.0,
        inference_timeout_s: float = 60.0,
        unreachable_timeout_s: float | None = UNREACHABLE_TIMEOUT_S,
        access_token: str | None = None,
    ) -> None:
        self.url = url
        self._options: dict[str, Any] = {
            "init_timeout_s": init_timeout_s,
            "inference_timeout_s": inference_timeout_s,
            "unreachable_timeout_s": unreachable_timeout_s,
            "access_token": access_token,
        }
        self._client: AsyncioModelClient | None = None  # made in the event loop, at first use
{%- if streaming %}
        self._stream_client: AsyncioDecoupledModelClient | None = None
{%- endif %}

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; the client cannot be used afterwards."""
        if self._client is not None:
            await self._client.close()
{%- if streaming %}
        if self._stream_client is not None:
            await self._stream_client.close()
{%- endif %}

    def _model_client(self) -> AsyncioModelClient:
        if self._client is None:
            self._client = AsyncioModelClient(self.url, spec.MODEL_NAME, **self._options)
        return self._client

    async def predict({{ parameters() }}
    ) -> Prediction:
        """Send one sample; return its outputs.
{{ arguments(false) }}
        """
        return _prediction(await self._model_client().infer_sample(**_inputs(locals(), batched=False)))
{%- if batching %}

    async def predict_batch({{ parameters() }}
    ) -> Prediction:
        """Send a batch of samples (the first axis); return their outputs, in order.

        More than ``spec.MAX_BATCH_SIZE`` samples go in batches of that size, ``PARALLEL_BATCHES`` at once.
{{ arguments(true) }}
        """
        chunks = _chunks(_inputs(locals(), batched=True))
        client = self._model_client()
        if len(chunks) == 1:
            return _prediction(await client.infer_batch(**chunks[0]))
        slots = asyncio.Semaphore(PARALLEL_BATCHES)

        async def send(chunk: dict[str, Any]) -> dict[str, np.ndarray]:
            async with slots:
                return await client.infer_batch(**chunk)

        return _joined(list(await asyncio.gather(*(send(chunk) for chunk in chunks))))
{%- endif %}
{%- if streaming %}

    def stream({{ parameters() }}
    ) -> AsyncIterator[Prediction]:
        """Send one sample to the streaming model (gRPC only); ``async for`` over its responses.
{{ arguments(false) }}
        """
        if self._stream_client is None:
            self._stream_client = AsyncioDecoupledModelClient(
                self.url, spec.STREAM_MODEL_NAME, **self._options
            )
        return self._predictions(self._stream_client.infer_sample(**_inputs(locals(), batched=False)))

    @staticmethod
    async def _predictions(responses: AsyncIterator[dict[str, np.ndarray]]) -> AsyncIterator[Prediction]:
        async for outputs in responses:
            yield _prediction(outputs)
{%- endif %}


def _inputs(arguments: dict[str, Any], *, batched: bool) -> dict[str, Any]:
    """The model's inputs among a method's ``locals()``, converted and checked (``spec.as_input``)."""
    return {
        spec.name_of(tensor): spec.as_input(tensor, arguments[spec.name_of(tensor)], batched=batched)
        for tensor in spec.INPUTS
    }


def _prediction(outputs: dict[str, np.ndarray]) -> Prediction:
    return Prediction(**{spec.name_of(tensor): outputs[spec.name_of(tensor)] for tensor in spec.OUTPUTS})
{%- if batching %}


def _chunks(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """``inputs`` cut along the batch axis into batches of at most ``spec.MAX_BATCH_SIZE`` samples.

    Raises ValueError for inputs of different lengths, or of no samples (the server's refusal would not say
    what was wrong)."""
    counts = {name: len(value) for name, value in inputs.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise ValueError(f"Every input needs the same number of samples (the first axis), got {listed}.")
    count = next(iter(counts.values()))
    if count == 0:
        raise ValueError(
            "predict_batch got 0 samples: give it at least one (the first axis of each input counts them)."
        )
    return [
        {name: value[start : start + spec.MAX_BATCH_SIZE] for name, value in inputs.items()}
        for start in range(0, count, spec.MAX_BATCH_SIZE)
    ]


def _joined(parts: list[dict[str, np.ndarray]]) -> Prediction:
    """The outputs of consecutive batches as one prediction, in the order of the batches."""
    return _prediction(
        {
            spec.name_of(tensor): np.concatenate([part[spec.name_of(tensor)] for part in parts])
            for tensor in spec.OUTPUTS
        }
    )
{%- endif %}


def main(argv: list[str] | None = None) -> int:
    """Send the example request (``spec.example_inputs``) or a file's inputs and print the outputs; 1 if the
    request fails."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.client",
        description=f"Send an example request, or a file's inputs, to the {spec.MODEL_NAME} model and print "
        f"its outputs. A service that requires its access token gets it from the {TOKEN_VARIABLE} "
        "environment variable.",
    )
    parser.add_argument(
        "--url", default=DEFAULT_URL, help="http://host:port or grpc://host:port (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="how long to wait for the model to be ready, and for each response (default: %(default)s); "
        f"where nothing listens at the URL it gives up after {UNREACHABLE_TIMEOUT_S:g} s",
    )
    parser.add_argument(
        "--input",
        type=Path,
        help=f"send the inputs in this file ({', '.join(FORMATS)}; by input name{{ ', one sample or a batch' if batching }})",
    )
{%- if batching %}
    parser.add_argument(
        "--batch-size", type=int, default=0, help="send a batch of this many example samples instead of one"
    )
{%- endif %}
{%- if streaming %}
    parser.add_argument(
        "--stream", action="store_true", help="stream the responses of the streaming model (gRPC)"
    )
{%- endif %}
    args = parser.parse_args(argv)
{%- if batching %}
    if not 0 <= args.batch_size <= spec.MAX_BATCH_SIZE:
        parser.error(
            f"--batch-size must be from 1 to {spec.MAX_BATCH_SIZE} (0: one sample), got {args.batch_size}"
        )
    if args.batch_size and args.input:
        parser.error("give --input or --batch-size, not both")
{%- endif %}
{%- if streaming %}
    if args.stream and not args.url.startswith("grpc"):
        parser.error(f"--stream needs gRPC: give --url grpc://host:port (got {args.url})")
{%- endif %}
    inputs, batched = spec.example_inputs(), False
    if args.input:
        try:
            inputs, batched = read_inputs(args.input)
        except ValueError as error:
            parser.error(str(error))
    token = os.environ.get(TOKEN_VARIABLE) or None
    timeouts = {"init_timeout_s": args.timeout_s, "inference_timeout_s": args.timeout_s}
    _say_what_the_client_waits_for()
    try:
        with Client(args.url, access_token=token, **timeouts) as client:
{%- if streaming %}
            if args.stream:
                if batched:
                    parser.error(f"--stream sends one sample; {args.input} holds a batch")
                for number, prediction in enumerate(client.stream(**inputs), start=1):
                    print(f"response {number}:")
                    _print(prediction)
                return 0
{%- endif %}
{%- if batching %}
            if args.batch_size:
                inputs, batched = spec.example_inputs(args.batch_size), True
            if batched:
                _print(client.predict_batch(**inputs))
                return 0
{%- endif %}
            _print(client.predict(**inputs))
    except ValueError as error:  # inputs the client refuses before sending them
        parser.error(str(error))
    except PyTritonClientError as error:
        print(f"The request to {args.url} failed: {error}", file=sys.stderr)
        if isinstance(error, (PyTritonClientTimeoutError, PyTritonClientModelUnavailableError)) or (
            "Cannot reach" in str(error)
        ):
            print("Is the service running there? Start it with: make serve", file=sys.stderr)
        return 1
    return 0


def _say_what_the_client_waits_for() -> None:
    """Print the client's wait messages (logger ``tritonrt.client``: what it waits for, for how long) on
    stderr, so that a wait is never silent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("tritonrt.client")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _print(prediction: Prediction) -> None:
    """One line per output: name, dtype, shape and (abridged) values."""
    for field in dataclasses.fields(prediction):
        value = getattr(prediction, field.name)
        values = " ".join(np.array2string(value, threshold=20, separator=", ").split())
        print(f"{field.name}: {value.dtype} {value.shape} {values}")


if __name__ == "__main__":
    raise SystemExit(main())
