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
"""The typed client of the model, and a command line that sends it an example request.

The URL's scheme picks the protocol: ``http://host:8000`` or ``grpc://host:8001``.

Example::

    from {{ cookiecutter.package }} import spec
    from {{ cookiecutter.package }}.client import Client

    with Client("http://localhost:8000") as client:
        prediction = client.predict(**spec.example_inputs())
        print(prediction.{{ outputs[0].name }})

Command line::

    python -m {{ cookiecutter.package }}.client --url grpc://localhost:8001

A service started with ``{{ cookiecutter.package | upper }}_REQUIRE_TOKEN=true`` needs its access token:
``Client(url, access_token=...)``; the command line reads it from the variable
``{{ cookiecutter.package | upper }}_ACCESS_TOKEN`` (not from an argument, which any local user could read
with ``ps``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
{%- if streaming %}
from collections.abc import AsyncIterator, Iterator
{%- endif %}
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from tritonrt.client import {{ "AsyncioDecoupledModelClient, " if streaming }}AsyncioModelClient{{ ", DecoupledModelClient" if streaming }}, ModelClient
from tritonrt.client.exceptions import PyTritonClientError

from {{ cookiecutter.package }} import spec

DEFAULT_URL = "http://localhost:8000"
TOKEN_VARIABLE = "{{ cookiecutter.package | upper }}_ACCESS_TOKEN"


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The model's outputs, one field per output{{ " (batch-first from ``predict_batch``)" if batching }}."""
{% for tensor in outputs %}
    {{ tensor.name }}: np.ndarray
{%- endfor %}


class Client:
    """Calls the model over HTTP or gRPC; one client may be shared by many threads.

    ``init_timeout_s`` bounds the wait for the server and model to be ready (before the first request),
    ``inference_timeout_s`` the wait for each response; ``access_token`` is sent with every request (needed
    when the service requires it).

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
        access_token: str | None = None,
    ) -> None:
        self.url = url
        self._options: dict[str, Any] = {
            "init_timeout_s": init_timeout_s,
            "inference_timeout_s": inference_timeout_s,
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
        """Send a batch of up to ``spec.MAX_BATCH_SIZE`` samples (the first axis); return its outputs.
{{ arguments(true) }}
        """
        return _prediction(self._client.infer_batch(**_inputs(locals(), batched=True)))
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
        access_token: str | None = None,
    ) -> None:
        self.url = url
        self._options: dict[str, Any] = {
            "init_timeout_s": init_timeout_s,
            "inference_timeout_s": inference_timeout_s,
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
        """Send a batch of up to ``spec.MAX_BATCH_SIZE`` samples (the first axis); return its outputs.
{{ arguments(true) }}
        """
        return _prediction(await self._model_client().infer_batch(**_inputs(locals(), batched=True)))
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


def main(argv: list[str] | None = None) -> int:
    """Send the example request (``spec.example_inputs``) and print the outputs; 1 if the request fails."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.client",
        description=f"Send an example request to the {spec.MODEL_NAME} model and print its outputs. A "
        f"service that requires its access token gets it from the {TOKEN_VARIABLE} environment variable.",
    )
    parser.add_argument(
        "--url", default=DEFAULT_URL, help="http://host:port or grpc://host:port (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="how long to wait for the model to be ready, and for each response (default: %(default)s)",
    )
{%- if batching %}
    parser.add_argument(
        "--batch-size", type=int, default=0, help="send a batch of this many samples instead of one"
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
{%- endif %}
    token = os.environ.get(TOKEN_VARIABLE) or None
    timeouts = {"init_timeout_s": args.timeout_s, "inference_timeout_s": args.timeout_s}
    try:
        with Client(args.url, access_token=token, **timeouts) as client:
{%- if streaming %}
            if args.stream:
                for number, prediction in enumerate(client.stream(**spec.example_inputs()), start=1):
                    print(f"response {number}:")
                    _print(prediction)
                return 0
{%- endif %}
{%- if batching %}
            if args.batch_size:
                _print(client.predict_batch(**spec.example_inputs(args.batch_size)))
                return 0
{%- endif %}
            _print(client.predict(**spec.example_inputs()))
    except PyTritonClientError as error:
        print(f"The request to {args.url} failed: {error}", file=sys.stderr)
        print("Is the service running there? Start it with: make serve", file=sys.stderr)
        return 1
    return 0


def _print(prediction: Prediction) -> None:
    """One line per output: name, dtype, shape and (abridged) values."""
    for field in dataclasses.fields(prediction):
        value = getattr(prediction, field.name)
        values = " ".join(np.array2string(value, threshold=20, separator=", ").split())
        print(f"{field.name}: {value.dtype} {value.shape} {values}")


if __name__ == "__main__":
    raise SystemExit(main())
