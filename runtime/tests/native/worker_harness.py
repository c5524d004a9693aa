"""A CallableWorker driven by a FakeBackend, for the worker's tests (test_worker.py, test_worker_calls.py; the
``harness`` fixture of conftest.py makes them)."""

from __future__ import annotations

import threading

import numpy as np
from native_testlib import FakeBackend

from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.resolve import build_model_config
from tritonrt.proxy import wire
from tritonrt.proxy.connection import InstanceIdentity, WorkerSettings
from tritonrt.proxy.listener import WorkerListener
from tritonrt.proxy.wire import RequestMeta, TensorMeta
from tritonrt.proxy.wire_decode import decode_body
from tritonrt.proxy.worker import CallableWorker

__all__ = ["THRESHOLD", "TOKEN", "X", "Y", "Harness"]

TOKEN = "0123456789abcdef" * 4
THRESHOLD = 1024
X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))


class Harness:
    """A CallableWorker on a socket in ``folder`` and a connected FakeBackend; records the worker's reports."""

    def __init__(self, folder, infer_callable, *, decoupled: bool = False, strict: bool = False):
        config = ModelConfig(batching=not decoupled, max_batch_size=8, decoupled=decoupled)
        self.config = build_model_config("m", 1, [X], [Y], config)
        max_batch_size = self.config.max_batch_size if self.config.batching else 0
        identity = InstanceIdentity("m", 0, TOKEN, decoupled, max_batch_size)
        settings = WorkerSettings(inline_threshold=THRESHOLD, region_limit=8 << 20)
        self.listener = WorkerListener(folder / "w.sock", identity, settings)
        self.unrecoverable: list[str] = []
        self.lost = threading.Event()
        self.worker = CallableWorker(
            infer_callable,
            self.listener,
            self.config,
            strict=strict,
            on_unrecoverable=self.unrecoverable.append,
            on_peer_lost=self.lost.set,
        )
        self.worker.start()
        self.backend = self.connect(decoupled, max_batch_size)

    def connect(self, decoupled: bool = False, max_batch_size: int = 8) -> FakeBackend:
        backend = FakeBackend(self.listener.path, wire.Hello(0, max_batch_size, 1, 19, "m", TOKEN, "t"), decoupled)
        assert backend.read()[0].kind == wire.KIND_WELCOME
        return backend

    def send(self, rows: list[list[float]], *, region: bool = False, announce: bool = False, **parameters) -> int:
        """One request per row (FP32 input x of shape (1, n)), inline or in the backend's region."""
        requests, data, offset = [], b"", 0
        for row in rows:
            raw = np.asarray([row], np.float32).tobytes()
            location = wire.LOCATION_SENDER_REGION if region else wire.LOCATION_INLINE
            meta = TensorMeta("x", wire.DTYPE_FP32, location, offset, len(raw), (1, len(row)))
            requests.append(RequestMeta("", 0, None, dict(parameters), None, [meta]))
            if region:
                self.backend.region.map[offset : offset + len(raw)] = raw
            else:
                data += raw
            offset += len(raw)
        return self.backend.send_batch(requests, data, region=region, announce=announce)

    def reply(self):
        header, message = self.backend.read()
        return header, decode_body(header, message)

    def close(self) -> None:
        self.worker.stop()
        self.worker.join(5)
        if self.backend.sock.fileno() >= 0:
            self.backend.close()
