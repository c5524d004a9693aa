"""KServe v2 over gRPC: :class:`GrpcTransport` (blocking, thread-safe) and :class:`AsyncGrpcTransport` (asyncio),
both with the decoupled models' response streams.

Example::

    transport = GrpcTransport(TritonUrl.from_url("grpc://localhost:8001"), auth_headers={})
    request = InferRequest("tokens", None, {"prompt": prompt}, ["token"], parameters=None, headers={})
    for outputs in transport.stream_infer(request, timeout=5.0):
        print(outputs["token"])
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc
import tritonclient.grpc.aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tritonrt.client._slots import ClientSlot
from tritonrt.client._transport import (
    AsyncTransportBase,
    InferRequest,
    Outputs,
    TritonUrl,
    call_error,
    from_tritonclient,
    server_error,
    timeout_error,
)
from tritonrt.client.exceptions import PyTritonClientTimeoutError, PyTritonClientValueError

__all__ = ["AsyncGrpcTransport", "GrpcTransport"]

_CONNECT_TIMEOUT_S = 5.0  # the liveness call that connects a new channel (its failure is the stream's to report)


def build_grpc_inputs(named: Mapping[str, np.ndarray]) -> list[tritonclient.grpc.InferInput]:
    """tritonclient.grpc inputs carrying ``named`` arrays."""
    inputs = []
    for name, array in named.items():
        infer_input = tritonclient.grpc.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def grpc_outputs(result: Any) -> Outputs:
    """The outputs of a tritonclient.grpc ``InferResult`` by name."""
    return {output.name: result.as_numpy(output.name) for output in result.get_response().outputs}


def is_final_response(result: Any) -> bool:
    """True for the response that closes a decoupled request (``triton_final_response``)."""
    parameters = result.get_response().parameters
    return "triton_final_response" in parameters and parameters["triton_final_response"].bool_param


def grpc_request(request: InferRequest) -> dict[str, Any]:
    """The keyword arguments of tritonclient.grpc's ``infer`` that send ``request`` (headers left out).

    ``async_stream_infer`` takes them too, and grpc.aio's ``stream_infer`` takes them as one request.
    """
    return {
        "model_name": request.model_name,
        "inputs": build_grpc_inputs(request.inputs),
        "model_version": request.version_or_empty,
        "outputs": [tritonclient.grpc.InferRequestedOutput(name) for name in request.output_names],
        "parameters": request.parameters_dict,
    }


def streamed_outputs(result: Any, error: Any, *, url: TritonUrl, model: str) -> dict[str, np.ndarray] | None:
    """The outputs of one streamed response, None for an empty one; raises the error the server streamed."""
    if error is not None:
        raise from_tritonclient(error, url=url, action="Inference", model=model)
    return grpc_outputs(result) if result.get_response().outputs else None


def channel_args(fresh: int | None) -> list[tuple[str, Any]] | None:
    """tritonclient's channel options (None: its defaults); with a ``fresh`` number, plus an option naming it.

    gRPC shares one connection between the channels of a process that name the same server with the same
    options, so a new channel would reuse the very connection (pinned to a stopping server behind a connection
    balancer) that it is made to replace; the channels made with the same ``fresh`` number share a new one.
    """
    if fresh is None:
        return None
    keepalive = tritonclient.grpc.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", tritonclient.grpc.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", tritonclient.grpc.MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("tritonrt.fresh_connections", fresh),
    ]


def stream_timeout_error(url: TritonUrl, timeout: float) -> PyTritonClientTimeoutError:
    """The error for a streamed response that did not come within ``timeout``."""
    return timeout_error(url, "Waiting for a streamed response", timeout, "inference_timeout_s")


class GrpcTransport:
    """Synchronous KServe v2 gRPC calls; safe to use from many threads at once."""

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        self.url = url
        self._auth_headers = dict(auth_headers)
        self._slot: ClientSlot[tritonclient.grpc.InferenceServerClient] = ClientSlot(
            self._new_client, lambda client: client.close()
        )
        self._connected = 0  # the generation whose channel _connect() connected

    def _new_client(self) -> tritonclient.grpc.InferenceServerClient:
        """A client on a new channel (sharing the connection of this transport's other channels; after a
        :meth:`reconnect`, a new one)."""
        fresh = channel_args(self._slot.fresh)
        return tritonclient.grpc.InferenceServerClient(self.url.without_scheme, channel_args=fresh)

    def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        return bool(self._call("Liveness check", "", timeout, "is_server_live"))

    def is_server_ready(self, timeout: float) -> bool:
        """True when the server says it is ready."""
        return bool(self._call("Readiness check", "", timeout, "is_server_ready"))

    def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        return bool(
            self._call(
                "Model readiness check",
                model_name,
                timeout,
                "is_model_ready",
                model_name,
                model_version or "",
            )
        )

    def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        index = self._call(
            "Reading the model repository index",
            "",
            timeout,
            "get_model_repository_index",
            as_json=True,
        )
        entries: list[dict[str, Any]] = index.get("models", [])
        return entries

    def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON (proto3 JSON: defaults left out, 64-bit integers as strings)."""
        response = self._call(
            "Reading the model config",
            model_name,
            timeout,
            "get_model_config",
            model_name,
            model_version or "",
            as_json=True,
        )
        config: dict[str, Any] = response["config"]
        return config

    def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load (or reload) the model."""
        self._call(
            "Loading the model",
            model_name,
            timeout,
            "load_model",
            model_name,
            config=config,
            files=dict(files) if files else None,
        )

    def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        self._call("Unloading the model", model_name, timeout, "unload_model", model_name)

    def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        result = self._call(
            "Inference",
            request.model_name,
            timeout,
            "infer",
            extra_headers=request.headers,
            **grpc_request(request),
        )
        return grpc_outputs(result)

    def stream_infer(self, request: InferRequest, timeout: float) -> Generator[Outputs, None, None]:
        """Send one request over a gRPC stream and yield each response; ``timeout`` bounds each wait.

        tritonclient.grpc allows one stream per client, so each call opens its own client, closed when
        the last response arrived or the caller stops iterating (its channel shares the connection of the
        transport's other channels).
        """
        self._connect()
        client = self._new_client()
        finished = False
        responses: queue.SimpleQueue[tuple[Any, InferenceServerException | None]] = queue.SimpleQueue()
        try:
            client.start_stream(
                callback=lambda result, error: responses.put((result, error)),
                headers={**self._auth_headers, **request.headers},
            )
            try:
                client.async_stream_infer(**grpc_request(request), enable_empty_final_response=True)
            except InferenceServerException as invalid:
                raise PyTritonClientValueError(f"Invalid inference request: {invalid.message()}") from None
            while True:
                try:
                    result, error = responses.get(timeout=timeout)
                except queue.Empty:
                    raise stream_timeout_error(self.url, timeout) from None
                outputs = streamed_outputs(result, error, url=self.url, model=request.model_name)
                if outputs is not None:
                    yield outputs
                if is_final_response(result):
                    finished = True
                    return
        finally:
            # Cancel only a stream the caller left early: a cancellation of an answered request kept the
            # server's drain waiting for it (the model never unloaded) until exit_timeout_secs.
            client.stop_stream(cancel_requests=not finished)
            client.close()

    @property
    def generation(self) -> int:
        """How many times :meth:`reconnect` opened a new channel."""
        return self._slot.generation

    def reconnect(self, generation: int) -> None:
        """Open a new channel for the next calls, unless another call did since ``generation``; the old one is
        closed once its calls in flight ended."""
        self._slot.replace(generation)

    def _connect(self) -> None:
        """Connect the transport's channel, made anew by a :meth:`reconnect` (a liveness call), so that the
        channels of streams share its connection instead of making one each."""
        with self._slot.use() as (client, generation):
            if generation == 0 or self._connected == generation:
                return
            with contextlib.suppress(InferenceServerException):
                client.is_server_live(headers=self._auth_headers, client_timeout=_CONNECT_TIMEOUT_S)
            self._connected = generation

    def close(self) -> None:
        """Close the channels."""
        self._slot.close()

    def _call(self, action: str, model: str, timeout: float, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the channel client's ``method`` with the headers and ``timeout``; errors as client exceptions."""
        headers = {**self._auth_headers, **(kwargs.pop("extra_headers", None) or {})}
        try:
            with self._slot.use() as (client, _):
                return getattr(client, method)(*args, headers=headers, client_timeout=timeout, **kwargs)
        except InferenceServerException as error:
            raise call_error(error, url=self.url, action=action, model=model, timeout_s=timeout) from None


class AsyncGrpcTransport(AsyncTransportBase):
    """KServe v2 over gRPC with grpc.aio, including decoupled streaming; the asyncio twin of :class:`GrpcTransport`."""

    def _make_client(self) -> Any:
        fresh = channel_args(self._slot.fresh)  # after a reconnect(): a new connection
        return tritonclient.grpc.aio.InferenceServerClient(self.url.without_scheme, channel_args=fresh)

    def _deadline(self, timeout: float) -> dict[str, float]:
        return {"client_timeout": timeout}

    async def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        index = await self._call(
            "Reading the model repository index",
            "",
            timeout,
            lambda: self.client.get_model_repository_index(
                headers=self._headers(), as_json=True, client_timeout=timeout
            ),
        )
        entries: list[dict[str, Any]] = index.get("models", [])
        return entries

    async def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON (proto3 JSON)."""
        response = await self._call(
            "Reading the model config",
            model_name,
            timeout,
            lambda: self.client.get_model_config(
                model_name, model_version or "", headers=self._headers(), as_json=True, client_timeout=timeout
            ),
        )
        config: dict[str, Any] = response["config"]
        return config

    async def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load (or reload) the model."""
        await self._call(
            "Loading the model",
            model_name,
            timeout,
            lambda: self.client.load_model(
                model_name,
                headers=self._headers(),
                config=config,
                files=dict(files) if files else None,
                client_timeout=timeout,
            ),
        )

    async def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        await self._call(
            "Unloading the model",
            model_name,
            timeout,
            lambda: self.client.unload_model(model_name, headers=self._headers(), client_timeout=timeout),
        )

    async def infer(self, request: InferRequest, timeout: float) -> Outputs:
        """Run one inference request and return its outputs by name."""
        result = await self._call(
            "Inference",
            request.model_name,
            timeout,
            lambda: self.client.infer(
                **grpc_request(request), headers=self._headers(request.headers), client_timeout=timeout
            ),
        )
        return grpc_outputs(result)

    async def stream_infer(self, request: InferRequest, timeout: float) -> AsyncGenerator[Outputs, None]:
        """Send one request over a gRPC stream and yield each response; ``timeout`` bounds each wait.

        The request stream ends after the one request; the server then closes the response stream once
        the model sent its final response.
        """
        request_kwargs = grpc_request(request)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request_kwargs

        async with self._slot.use() as (client, _):  # the channel stays open while the stream runs
            try:  # stream_infer is a plain function returning an async iterator
                responses = client.stream_infer(requests(), headers=self._headers(request.headers))
            except InferenceServerException as refused:
                raise from_tritonclient(refused, url=self.url, action="Inference", model=request.model_name) from None
            try:
                while True:
                    try:
                        result, error = await asyncio.wait_for(anext(responses), timeout)
                    except (TimeoutError, asyncio.TimeoutError):  # distinct classes before Python 3.11
                        raise stream_timeout_error(self.url, timeout) from None
                    except StopAsyncIteration:
                        return
                    except grpc.RpcError as rpc_error:
                        raise server_error(
                            str(rpc_error.details()),
                            str(rpc_error.code()),
                            url=self.url,
                            action="Inference",
                            model=request.model_name,
                        ) from None
                    outputs = streamed_outputs(result, error, url=self.url, model=request.model_name)
                    if outputs is not None:
                        yield outputs
            finally:
                responses.cancel()
