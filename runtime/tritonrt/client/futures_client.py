"""``FuturesModelClient``: a thread pool in front of one thread-safe ``ModelClient``; calls return Futures.

Example::

    with FuturesModelClient("localhost", "add", max_workers=8) as client:
        futures = [client.infer_sample(a=x, b=y) for x, y in pairs]
        results = [future.result() for future in futures]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from tritonrt.client._core import ClientBase
from tritonrt.client.client import ModelClient
from tritonrt.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientQueueFullError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["DEFAULT_MAX_QUEUE_SIZE", "DEFAULT_MAX_WORKERS", "FuturesModelClient"]

_T = TypeVar("_T")

DEFAULT_MAX_WORKERS = 128
DEFAULT_MAX_QUEUE_SIZE = 128


def _positive_int(value: int | None, name: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise PyTritonClientValueError(f"{name} must be a positive integer (or None), got {value!r}.")
    return value


class FuturesModelClient(ClientBase):
    """Client whose calls run on a thread pool and return ``concurrent.futures.Future`` objects.

    Errors a call would raise (see ``ModelClient``) come out of ``future.result()``; a request refused by a
    stopping server is sent once more, as by ``ModelClient``. The client itself may be used from many threads.

    Example::

        client = FuturesModelClient("grpc://localhost", "BERT", max_workers=4, max_queue_size=64)
        future = client.infer_batch(input_ids=ids)
        print(future.result()["logits"])
        client.close()

    Args:
        url, model_name, model_version, init_timeout_s, inference_timeout_s, model_config,
        ensure_model_is_ready, access_token, unreachable_timeout_s: as for ``ModelClient``.
        max_workers: threads running requests (default 128, as in PyTriton 0.7; threads start as needed);
            None: ``min(32, os.cpu_count() + 4)``.
        max_queue_size: requests that may wait for a free thread (default 128); None: unlimited.
        non_blocking: when the queue is full, raise PyTritonClientQueueFullError instead of waiting.
    """

    def __init__(
        self,
        url: str,
        model_name: str,
        model_version: str | None = None,
        *,
        max_workers: int | None = DEFAULT_MAX_WORKERS,
        max_queue_size: int | None = DEFAULT_MAX_QUEUE_SIZE,
        non_blocking: bool = False,
        init_timeout_s: float | None = None,
        inference_timeout_s: float | None = None,
        model_config: TritonModelConfig | None = None,
        ensure_model_is_ready: bool = True,
        access_token: str | None = None,
        unreachable_timeout_s: float | None = None,
    ):
        workers = _positive_int(max_workers, "max_workers") or min(32, (os.cpu_count() or 1) + 4)
        queue_size = _positive_int(max_queue_size, "max_queue_size")
        self._closed = True
        self._client = ModelClient(
            url,
            model_name,
            model_version,
            init_timeout_s=init_timeout_s,
            inference_timeout_s=inference_timeout_s,
            model_config=model_config,
            ensure_model_is_ready=ensure_model_is_ready,
            access_token=access_token,
            unreachable_timeout_s=unreachable_timeout_s,
        )
        self._settings = self._client._settings
        self._non_blocking = non_blocking
        self._max_queue_size = queue_size
        # Running plus queued requests may not exceed workers + max_queue_size.
        self._slots = threading.BoundedSemaphore(workers + queue_size) if queue_size else None
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tritonrt-futures-client")
        self._closed = False

    def _known_model_config(self) -> TritonModelConfig | None:
        return self._client._known_model_config()

    def __enter__(self) -> FuturesModelClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def infer_sample(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> Future[dict[str, np.ndarray]]:
        """Future of ``ModelClient.infer_sample``'s result.

        Raises:
            PyTritonClientClosedError: the client is closed.
            PyTritonClientQueueFullError: the queue is full and the client is non-blocking.
        """
        return self._submit(self._client.infer_sample, *inputs, parameters=parameters, headers=headers, **named_inputs)

    def infer_batch(
        self,
        *inputs: np.ndarray,
        parameters: dict[str, str | int | bool] | None = None,
        headers: dict[str, str | int | bool] | None = None,
        **named_inputs: np.ndarray,
    ) -> Future[dict[str, np.ndarray]]:
        """Future of ``ModelClient.infer_batch``'s result (raises as ``infer_sample``)."""
        return self._submit(self._client.infer_batch, *inputs, parameters=parameters, headers=headers, **named_inputs)

    def model_config(self) -> Future[TritonModelConfig]:
        """Future of the model's ``TritonModelConfig`` (read after waiting up to ``init_timeout_s``)."""
        return self._submit(lambda: self._client.model_config)

    def wait_for_model(self, timeout_s: float) -> Future[None]:
        """Future that resolves to None once the model is ready (or raises PyTritonClientTimeoutError)."""
        return self._submit(self._client.wait_for_model, timeout_s)

    def load_model(
        self, config: str | Mapping[str, Any] | None = None, files: dict[str, bytes] | None = None
    ) -> Future[None]:
        """Future of ``ModelClient.load_model``."""
        return self._submit(self._client.load_model, config, files)

    def unload_model(self) -> Future[None]:
        """Future of ``ModelClient.unload_model``."""
        return self._submit(self._client.unload_model)

    @property
    def retried_requests(self) -> int:
        """(tritonrt's own) Requests sent a second time after a stopping server refused them; see ``ModelClient``."""
        return self._client.retried_requests

    def close(self, wait: bool = True) -> None:
        """Stop taking requests and release the connections once the pending ones finished.

        Args:
            wait: block until the pending requests finished; with False they finish in the background.
        """
        if self._closed:
            return
        self._closed = True
        if wait:
            self._shutdown()
        else:
            threading.Thread(target=self._shutdown, name="tritonrt-futures-client-close").start()

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()

    def _submit(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> Future[_T]:
        self._check_open()
        if self._slots is not None and not self._slots.acquire(blocking=not self._non_blocking):
            raise PyTritonClientQueueFullError(
                f"The request queue of FuturesModelClient is full ({self._max_queue_size} waiting requests): "
                "wait for pending futures, raise max_queue_size, or use non_blocking=False to wait instead."
            )
        try:
            future = self._executor.submit(function, *args, **kwargs)
        except RuntimeError:  # close() shut the pool down meanwhile
            if self._slots is not None:
                self._slots.release()
            raise PyTritonClientClosedError(
                "FuturesModelClient is closed: create a new client to send more requests."
            ) from None
        slots = self._slots
        if slots is not None:
            future.add_done_callback(lambda _: slots.release())
        return future
