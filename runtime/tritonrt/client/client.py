"""Synchronous clients: ``ModelClient`` and, for decoupled (streaming) models, ``DecoupledModelClient``.

Example::

    with ModelClient("grpc://localhost", "add") as client:
        result = client.infer_sample(a=np.array([1.0], np.float32), b=np.array([2.0], np.float32))
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tritonrt.client._arguments import InferCall
from tritonrt.client._core import TransportClient, config_as_json
from tritonrt.client._grpc import GrpcTransport
from tritonrt.client._http import HttpTransport
from tritonrt.client._readiness import wait_for_model_ready, wait_for_server_ready
from tritonrt.client._shared_wait import SharedWait
from tritonrt.client._transport import InferRequest, Outputs, Transport
from tritonrt.client.exceptions import PyTritonClientError, PyTritonClientModelUnavailableError
from tritonrt.model_config.parser import parse_model_config
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["DecoupledModelClient", "ModelClient"]


class ModelClient(TransportClient):
    """Synchronous client of one model on a Triton Inference Server, over HTTP or gRPC.

    One client may be shared by many threads. It waits (up to ``init_timeout_s``) for the server and
    the model to be ready before its first request, or at construction with ``lazy_init=False``.

    A request that a server refused without running it because it is stopping (the model unloaded by its
    drain, the connection closed or reset before an answer, gRPC UNAVAILABLE) is sent once more, on a new
    connection: behind a connection balancer (a Kubernetes Service) that one reaches a ready replica. So a
    request may be sent twice; ``retried_requests`` counts these, the ``tritonrt.client`` logger says each at
    DEBUG. Not for sequence requests, nor a stream that already answered (docs/clients.md: "Requests refused
    by a stopping server").

    Example::

        with ModelClient("localhost", "BERT", init_timeout_s=60) as client:
            outputs = client.infer_batch(input_ids=ids, attention_mask=mask)
            single = client.infer_sample(ids[0], mask[0])  # adds and removes the batch axis

    Args:
        url: ``http://host:port``, ``grpc://host:port`` or ``host[:port]`` (HTTP); ports default to
            8000 (HTTP) and 8001 (gRPC).
        model_name: the model to call.
        model_version: a version number; None calls the latest version.
        lazy_init: if False, wait for the model and read its config now, not at the first request.
        init_timeout_s: how long to wait for the server and model to be ready (default 300 s); also
            bounds config reads and load/unload calls.
        inference_timeout_s: how long one inference may take (default 60 s).
        model_config: a known config of the model, to skip reading it from the server.
        ensure_model_is_ready: with ``model_config``, whether to still wait for readiness.
        access_token: the server's access token (TritonSecurityConfig), for restricted endpoints such as
            load_model/unload_model.
        unreachable_timeout_s: (tritonrt's own) give up waiting once nothing listened at the URL (every
            connection refused) for this long, instead of waiting ``init_timeout_s`` for a server that is not
            there; a server that answers is still waited for until ``init_timeout_s``. None (the default, as
            PyTriton): wait ``init_timeout_s`` either way. A wait says what it waits for on the
            ``tritonrt.client`` logger (INFO).

    Raises:
        PyTritonClientInvalidUrlError: the URL is invalid.
        PyTritonClientValueError: another argument is invalid.
        PyTritonClientTimeoutError, PyTritonClientModelUnavailableError: with ``lazy_init=False``, the
            model was not ready in time or is not available.
        PyTritonClientInferenceServerError: with ``lazy_init=False`` and ``unreachable_timeout_s``, nothing
            listened at the URL.
    """

    _transport: Transport

    def _open(self) -> None:
        self._first_wait: SharedWait[TritonModelConfig] = SharedWait()
        url, headers = self._settings.url, self._settings.auth_headers
        self._transport = GrpcTransport(url, headers) if url.scheme == "grpc" else HttpTransport(url, headers)

    def _opened(self) -> None:
        if not self._lazy_init:
            try:
                self._ensure_model_config()
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def model_config(self) -> TritonModelConfig:
        """The model's configuration, read from the server once (after waiting for readiness).

        Raises:
            PyTritonClientTimeoutError: the model was not ready within ``init_timeout_s``.
            PyTritonClientModelUnavailableError: the model is not available.
            PyTritonClientClosedError: the client is closed.
        """
        return self._ensure_model_config()

    @property
    def is_batching_supported(self) -> bool:
        """True when the model batches (``max_batch_size`` > 0); waits for readiness like ``model_config``."""
        return self._ensure_model_config().batching

    def wait_for_model(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the server to be live and the model ready.

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientModelUnavailableError: the server's model repository shows the model missing or
                failed to load (visible when the index is readable: pass ``access_token`` if restricted).
            PyTritonClientClosedError: the client is closed.
        """
        self._check_open()
        settings = self._settings
        wait_for_model_ready(
            self._transport, settings.model_name, settings.model_version, timeout_s, settings.unreachable_timeout_s
        )
        self._model_ready = True

    def wait_for_server(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the server to be live and ready (whatever its models).

        Raises:
            PyTritonClientTimeoutError: not ready within ``timeout_s``.
            PyTritonClientClosedError: the client is closed.
        """
        self._check_open()
        wait_for_server_ready(self._transport, timeout_s, self._settings.unreachable_timeout_s)

    def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Infer one sample (no batch axis; the client adds it for batching models and removes it after).

        Pass inputs positionally, in the model's input order, or by name; not both. ``parameters`` reach
        the inference callable as request parameters; ``headers`` are sent with the request (the server
        forwards those matching its header-forward pattern to the callable).

        Example::

            result = client.infer_sample(np.array([1, 2], np.float32))

        Raises:
            PyTritonClientValueError: inputs mixed, missing, unknown or of the wrong dtype.
            PyTritonClientTimeoutError: not ready within ``init_timeout_s`` or no answer within
                ``inference_timeout_s``.
            PyTritonClientModelUnavailableError: the model is not available.
            PyTritonClientInferenceServerError: the inference callable or the server failed.
            PyTritonClientClosedError: the client is closed.
        """
        return self._infer(InferCall(inputs, named_inputs, parameters, headers, sample=True))

    def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Infer a batch (the first axis of every input is the batch axis); see ``infer_sample``.

        Example::

            result = client.infer_batch(np.zeros((8, 2), np.float32))

        Raises:
            PyTritonClientModelDoesntSupportBatchingError: the model does not batch: use infer_sample.
            ...: the errors of ``infer_sample``.
        """
        return self._infer(InferCall(inputs, named_inputs, parameters, headers, sample=False))

    def load_model(self, config: str | Mapping[str, Any] | None = None, files: dict[str, bytes] | None = None) -> None:
        """Ask the server to load (or reload) the model; needs the access token where the server restricts it.

        Args:
            config: optional model config (JSON string or dict) to load the model with.
            files: optional override model directory, ``{"file:1/model.py": b"..."}``; needs ``config``.

        Raises:
            PyTritonClientInferenceServerError: the server refused (e.g. no or wrong access token) or the
                load failed.
        """
        self._check_open()
        self._transport.load_model(
            self._settings.model_name, config_as_json(config), files, self._settings.init_timeout_s
        )
        self._forget_model()

    def unload_model(self) -> None:
        """Ask the server to unload the model; needs the access token where the server restricts it."""
        self._check_open()
        self._transport.unload_model(self._settings.model_name, self._settings.init_timeout_s)
        self._forget_model()

    def close(self) -> None:
        """Close the connections; later calls raise PyTritonClientClosedError. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._transport.close()

    # -- internals -------------------------------------------------------------------------------

    def _ensure_model_config(self) -> TritonModelConfig:
        self._check_open()
        config = self._model_config
        if self._model_ready and config is not None:
            return config
        # Callers arriving while another waits share its wait: all are answered by the one deadline.
        return self._first_wait.run(self._wait_and_read_config)

    def _wait_and_read_config(self) -> TritonModelConfig:
        settings, generation = self._settings, self._generation
        if not self._model_ready:
            wait_for_model_ready(
                self._transport,
                settings.model_name,
                settings.model_version,
                settings.init_timeout_s,
                settings.unreachable_timeout_s,
            )
        config = self._model_config
        if config is None:
            raw = self._transport.model_config(settings.model_name, settings.model_version, settings.init_timeout_s)
            config = parse_model_config(raw, settings.version_number)
        self._remember_model(config, generation)
        return config

    def _infer(self, call: InferCall) -> dict[str, np.ndarray]:
        config = self._ensure_model_config()
        request = self._request(config, call)
        try:
            outputs = self._send(request)
        except PyTritonClientModelUnavailableError:
            self._forget_model()  # e.g. unloaded meanwhile: wait for it again next time
            raise
        return self._finish(config, outputs, sample=call.sample)

    def _send(self, request: InferRequest) -> dict[str, np.ndarray]:
        """Send ``request``; once more, on a new connection, if a stopping server refused it unanswered
        (``tritonrt.client._retry``), within what is left of ``inference_timeout_s``."""
        timeout = self._settings.inference_timeout_s
        generation, started = self._transport.generation, time.monotonic()
        try:
            return self._transport.infer(request, timeout)
        except PyTritonClientError as error:
            left = self._retries.time_left(request, error, self._settings.url.with_scheme, timeout, started)
            if not left:
                raise
        self._transport.reconnect(generation)
        return self._transport.infer(request, left)


class DecoupledModelClient(ModelClient):
    """Synchronous client of a decoupled model: ``infer_sample``/``infer_batch`` iterate its responses.

    Decoupled models stream zero or more responses per request; Triton sends them over gRPC only, so
    the URL must be ``grpc://``. ``inference_timeout_s`` bounds the wait for each response.

    Example::

        with DecoupledModelClient("grpc://localhost", "tokens") as client:
            for partial in client.infer_sample(prompt=np.array([b"hello"])):
                print(partial["token"])

    Raises:
        PyTritonClientValueError: the URL is not gRPC.
    """

    _decoupled = True

    def infer_sample(  # type: ignore[override]
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Send one sample; iterate the model's responses (batch axis handled as in ModelClient).

        Raises (when called or while iterating):
            PyTritonClientValueError: the model is not decoupled, or bad inputs.
            ...: the errors of ``ModelClient.infer_sample``.
        """
        return self._stream(InferCall(inputs, named_inputs, parameters, headers, sample=True))

    def infer_batch(  # type: ignore[override]
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Send one batch; iterate the model's responses."""
        return self._stream(InferCall(inputs, named_inputs, parameters, headers, sample=False))

    def _stream(self, call: InferCall) -> Iterator[dict[str, np.ndarray]]:
        config = self._ensure_model_config()
        request = self._request(config, call)
        return self._debatched(config, request, sample=call.sample)

    def _debatched(self, config: TritonModelConfig, request: InferRequest, *, sample: bool) -> Iterator[Outputs]:
        """The stream's responses; the request sent once more, on a new connection, if a stopping server refused
        it unanswered before its first response (``tritonrt.client._retry``)."""
        generation = self._transport.generation
        for attempt in (1, 2):
            responses = self._transport.stream_infer(request, self._settings.inference_timeout_s)
            try:
                try:
                    first = next(responses)
                except StopIteration:
                    return
                except PyTritonClientError as error:
                    if attempt == 2 or not self._retries.send_again(request, error, self._settings.url.with_scheme):
                        raise
                    self._transport.reconnect(generation)
                    continue
                yield self._finish(config, first, sample=sample)
                for outputs in responses:
                    yield self._finish(config, outputs, sample=sample)
                return
            finally:
                responses.close()  # cancels the stream when the caller stops early
