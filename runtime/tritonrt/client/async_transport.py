"""Asyncio KServe v2 calls on tritonclient.http.aio (aiohttp) and tritonclient.grpc.aio.

Each call runs under ``asyncio.wait_for`` so every timeout, sub-second ones included, holds for both
protocols. The tritonclient clients are made on first use, inside the running event loop.

Example::

    transport = make_async_transport(TritonUrl.from_url("grpc://localhost:8001"), auth_headers={})
    request = InferRequest("add", None, {"a": a}, ["sum"], parameters=None, headers={})
    outputs = await transport.infer(request, timeout=1.0)
    await transport.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import grpc
import numpy as np
import tritonclient.grpc.aio
import tritonclient.http.aio
from tritonclient.utils import InferenceServerException

from tritonrt.client.errors import call_error, from_tritonclient, server_error, timeout_error, unreachable_error
from tritonrt.client.grpc_transport import grpc_outputs, grpc_request, stream_timeout_error, streamed_outputs
from tritonrt.client.http_transport import HttpTransport, build_http_inputs, http_outputs, requested_http_outputs
from tritonrt.client.request import InferRequest
from tritonrt.client.url import TritonUrl


class _AsyncTransport:
    """What both protocols share: lazy client, timeouts and error mapping."""

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        self.url = url
        self._auth_headers = dict(auth_headers)
        self._client: Any = None

    def _make_client(self) -> Any:
        raise NotImplementedError

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self._auth_headers, **(extra or {})}

    def _deadline(self, timeout: float) -> dict[str, float]:
        """Keyword arguments that give a call its own deadline, where the protocol has one."""
        return {}

    async def _call(self, action: str, model: str, timeout: float, make: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await asyncio.wait_for(make(), timeout)
        except TimeoutError:
            raise timeout_error(self.url, action, timeout) from None
        except InferenceServerException as error:
            raise call_error(error, url=self.url, action=action, model=model, timeout_s=timeout) from None
        except (aiohttp.ClientError, OSError) as error:
            raise unreachable_error(self.url, error) from None

    async def is_server_live(self, timeout: float) -> bool:
        """True when the server answers its liveness probe."""
        return await self._call(
            "Liveness check",
            "",
            timeout,
            lambda: self.client.is_server_live(headers=self._headers(), **self._deadline(timeout)),
        )

    async def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool:
        """True when the model (version) is loaded and ready."""
        return await self._call(
            "Model readiness check",
            model_name,
            timeout,
            lambda: self.client.is_model_ready(
                model_name, model_version or "", headers=self._headers(), **self._deadline(timeout)
            ),
        )

    async def close(self) -> None:
        """Close the underlying client, if one was made."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class AsyncHttpTransport(_AsyncTransport):
    """KServe v2 over HTTP with aiohttp."""

    def __init__(self, url: TritonUrl, auth_headers: Mapping[str, str]):
        super().__init__(url, auth_headers)
        self._sync = HttpTransport(url, auth_headers)

    def _make_client(self) -> Any:
        # Timeouts come from asyncio.wait_for; none in aiohttp itself.
        return tritonclient.http.aio.InferenceServerClient(self.url.without_scheme, conn_timeout=None)

    async def repository_index(self, timeout: float) -> list[dict[str, Any]]:
        """Entries (name, version, state, reason) of the model repository index."""
        return await self._call(
            "Reading the model repository index",
            "",
            timeout,
            lambda: self.client.get_model_repository_index(headers=self._headers()),
        )

    async def model_config(self, model_name: str, model_version: str | None, timeout: float) -> dict[str, Any]:
        """The model's config as JSON."""
        return await self._call(
            "Reading the model config",
            model_name,
            timeout,
            lambda: self.client.get_model_config(model_name, model_version or "", headers=self._headers()),
        )

    async def load_model(
        self, model_name: str, config: str | None, files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """Ask the server to load the model (in a thread, on the sync transport: rare, and it may be slow)."""
        await asyncio.to_thread(self._sync.load_model, model_name, config, files, timeout)

    async def unload_model(self, model_name: str, timeout: float) -> None:
        """Ask the server to unload the model."""
        await asyncio.to_thread(self._sync.unload_model, model_name, timeout)

    async def infer(self, request: InferRequest, timeout: float) -> dict[str, np.ndarray]:
        """Run one inference request and return its outputs by name."""
        result = await self._call(
            "Inference",
            request.model_name,
            timeout,
            lambda: self.client.infer(
                request.model_name,
                build_http_inputs(request.inputs),
                model_version=request.version_or_empty,
                outputs=requested_http_outputs(request.output_names),
                headers=self._headers(request.headers),
                parameters=request.parameters_dict,
            ),
        )
        return http_outputs(result)

    async def close(self) -> None:
        """Close the aiohttp session and the connections of load/unload calls."""
        await super().close()
        self._sync.close()


class AsyncGrpcTransport(_AsyncTransport):
    """KServe v2 over gRPC with grpc.aio, including decoupled streaming."""

    def _make_client(self) -> Any:
        return tritonclient.grpc.aio.InferenceServerClient(self.url.without_scheme)

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
        return index.get("models", [])

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
        return response["config"]

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

    async def infer(self, request: InferRequest, timeout: float) -> dict[str, np.ndarray]:
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

    async def stream_infer(self, request: InferRequest, timeout: float) -> AsyncIterator[dict[str, np.ndarray]]:
        """Send one request over a gRPC stream and yield each response; ``timeout`` bounds each wait.

        The request stream ends after the one request; the server then closes the response stream once
        the model sent its final response.
        """
        request_kwargs = grpc_request(request)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request_kwargs

        try:  # stream_infer is a plain function returning an async iterator
            responses = self.client.stream_infer(requests(), headers=self._headers(request.headers))
        except InferenceServerException as error:
            raise from_tritonclient(error, url=self.url, action="Inference", model=request.model_name) from None
        try:
            while True:
                try:
                    result, error = await asyncio.wait_for(anext(responses), timeout)
                except TimeoutError:
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


def make_async_transport(url: TritonUrl, auth_headers: Mapping[str, str]) -> AsyncHttpTransport | AsyncGrpcTransport:
    """The asyncio transport for the URL's scheme."""
    return (AsyncGrpcTransport if url.scheme == "grpc" else AsyncHttpTransport)(url, auth_headers)
