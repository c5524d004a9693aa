"""Asyncio clients: ``AsyncioModelClient`` and, for decoupled models, ``AsyncioDecoupledModelClient``.

Example::

    async with AsyncioModelClient("grpc://localhost", "add") as client:
        result = await client.infer_sample(a=np.array([1.0], np.float32), b=np.array([2.0], np.float32))
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np

from tritonrt.client._arguments import InferCall
from tritonrt.client._core import TransportClient, config_as_json
from tritonrt.client._grpc import AsyncGrpcTransport
from tritonrt.client._http import AsyncHttpTransport
from tritonrt.client._readiness import async_wait_for_model_ready
from tritonrt.client._shared_wait import AsyncSharedWait
from tritonrt.client._transport import AsyncTransport, InferRequest, Outputs
from tritonrt.client.exceptions import PyTritonClientError, PyTritonClientModelUnavailableError
from tritonrt.model_config.parser import parse_model_config
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["AsyncioDecoupledModelClient", "AsyncioModelClient"]


class AsyncioModelClient(TransportClient):
    """Asyncio client of one model, over HTTP (aiohttp) or gRPC (grpc.aio).

    Same arguments, errors and retry of a request refused by a stopping server as ``ModelClient``; methods are
    coroutines, and ``model_config`` and ``is_batching_supported`` are awaitable properties. With
    ``lazy_init=False`` the wait for readiness happens when entering ``async with``.

    Example::

        async with AsyncioModelClient("localhost", "BERT", lazy_init=False) as client:
            config = await client.model_config
            outputs = await client.infer_batch(input_ids=ids)
    """

    _transport: AsyncTransport

    def _open(self) -> None:
        self._first_wait: AsyncSharedWait[TritonModelConfig] = AsyncSharedWait()
        url, headers = self._settings.url, self._settings.auth_headers
        self._transport = AsyncGrpcTransport(url, headers) if url.scheme == "grpc" else AsyncHttpTransport(url, headers)

    async def __aenter__(self) -> AsyncioModelClient:
        if not self._lazy_init:
            try:
                await self._ensure_model_config()
            except BaseException:
                await self.close()
                raise
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def model_config(self) -> Any:
        """Awaitable: the model's ``TritonModelConfig`` (read once, after waiting for readiness)."""
        return self._ensure_model_config()

    @property
    def is_batching_supported(self) -> Any:
        """Awaitable: True when the model batches (``max_batch_size`` > 0)."""
        return self._batching()

    async def wait_for_model(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the server to be live and the model ready (see ModelClient)."""
        self._check_open()
        settings = self._settings
        await async_wait_for_model_ready(
            self._transport, settings.model_name, settings.model_version, timeout_s, settings.unreachable_timeout_s
        )
        self._model_ready = True

    async def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Infer one sample; see ``ModelClient.infer_sample``.

        Example::

            result = await client.infer_sample(np.array([1, 2], np.float32))
        """
        return await self._infer(InferCall(inputs, named_inputs, parameters, headers, sample=True))

    async def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Infer a batch; see ``ModelClient.infer_batch``."""
        return await self._infer(InferCall(inputs, named_inputs, parameters, headers, sample=False))

    async def load_model(
        self, config: str | Mapping[str, Any] | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Ask the server to load (or reload) the model; see ``ModelClient.load_model``."""
        self._check_open()
        await self._transport.load_model(
            self._settings.model_name, config_as_json(config), files, self._settings.init_timeout_s
        )
        self._forget_model()

    async def unload_model(self) -> None:
        """Ask the server to unload the model; see ``ModelClient.unload_model``."""
        self._check_open()
        await self._transport.unload_model(self._settings.model_name, self._settings.init_timeout_s)
        self._forget_model()

    async def close(self) -> None:
        """Close the connections; later calls raise PyTritonClientClosedError. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._first_wait.cancel()
            await self._transport.close()

    # -- internals -------------------------------------------------------------------------------

    async def _batching(self) -> bool:
        return (await self._ensure_model_config()).batching

    async def _ensure_model_config(self) -> TritonModelConfig:
        self._check_open()
        config = self._model_config
        if self._model_ready and config is not None:
            return config
        # Callers arriving while another waits share its wait: all are answered by the one deadline.
        return await self._first_wait.run(self._wait_and_read_config)

    async def _wait_and_read_config(self) -> TritonModelConfig:
        settings, generation = self._settings, self._generation
        if not self._model_ready:
            await async_wait_for_model_ready(
                self._transport,
                settings.model_name,
                settings.model_version,
                settings.init_timeout_s,
                settings.unreachable_timeout_s,
            )
        config = self._model_config
        if config is None:
            raw = await self._transport.model_config(
                settings.model_name, settings.model_version, settings.init_timeout_s
            )
            config = parse_model_config(raw, settings.version_number)
        self._remember_model(config, generation)
        return config

    async def _infer(self, call: InferCall) -> dict[str, np.ndarray]:
        config = await self._ensure_model_config()
        request = self._request(config, call)
        try:
            outputs = await self._send(request)
        except PyTritonClientModelUnavailableError:
            self._forget_model()
            raise
        return self._finish(config, outputs, sample=call.sample)

    async def _send(self, request: InferRequest) -> Outputs:
        """Send ``request``; once more, on a new connection, if a stopping server refused it unanswered
        (``tritonrt.client._retry``), within what is left of ``inference_timeout_s``."""
        timeout = self._settings.inference_timeout_s
        generation, started = self._transport.generation, time.monotonic()
        try:
            return await self._transport.infer(request, timeout)
        except PyTritonClientError as error:
            left = self._retries.time_left(request, error, self._settings.url.with_scheme, timeout, started)
            if not left:
                raise
        await self._transport.reconnect(generation)
        return await self._transport.infer(request, left)


class AsyncioDecoupledModelClient(AsyncioModelClient):
    """Asyncio client of a decoupled model: ``infer_sample``/``infer_batch`` are async iterators.

    gRPC only; ``inference_timeout_s`` bounds the wait for each response.

    Example::

        async with AsyncioDecoupledModelClient("grpc://localhost", "tokens") as client:
            async for partial in client.infer_sample(prompt=np.array([b"hello"])):
                print(partial["token"])
    """

    _decoupled = True

    def infer_sample(  # type: ignore[override]
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Send one sample; ``async for`` over the model's responses.

        Argument errors raise at the call; server errors while iterating.
        """
        return self._stream(InferCall(inputs, named_inputs, parameters, headers, sample=True))

    def infer_batch(  # type: ignore[override]
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> AsyncIterator[dict[str, np.ndarray]]:
        """Send one batch; ``async for`` over the model's responses."""
        return self._stream(InferCall(inputs, named_inputs, parameters, headers, sample=False))

    async def _stream(self, call: InferCall) -> AsyncIterator[dict[str, np.ndarray]]:
        """The stream's responses; the request sent once more, on a new connection, if a stopping server refused
        it unanswered before its first response (``tritonrt.client._retry``)."""
        config = await self._ensure_model_config()
        request = self._request(config, call)
        generation = self._transport.generation
        for attempt in (1, 2):
            responses = self._transport.stream_infer(request, self._settings.inference_timeout_s)
            try:
                try:
                    first = await anext(responses)
                except StopAsyncIteration:
                    return
                except PyTritonClientError as error:
                    if attempt == 2 or not self._retries.send_again(request, error, self._settings.url.with_scheme):
                        raise
                    await self._transport.reconnect(generation)
                    continue
                yield self._finish(config, first, sample=call.sample)
                async for outputs in responses:
                    yield self._finish(config, outputs, sample=call.sample)
                return
            finally:
                await responses.aclose()  # cancels the gRPC call when the caller stops early
