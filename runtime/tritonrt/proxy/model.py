"""The proxy model: runs inside Triton's Python backend stub and forwards batches to the callable.

Triton loads it through the ``model.py`` shim that tritonrt writes into the model repository. On
``initialize`` it claims one of the model's worker sockets (a lock file per callable, held for the life of
the stub, so multi-instance models get one callable each and a restarted stub can take its slot again).
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib

import numpy as np
import zmq

import triton_python_backend_utils as pb_utils  # provided by the stub, importable only in it
from tritonrt.proxy import protocol

_WAIT_SLICE_MS = 1000


def _parameter(config: dict, key: str) -> str:
    return config["parameters"][key]["string_value"]


class TritonPythonModel:
    """Triton's Python-backend model interface (initialize / execute / finalize)."""

    def initialize(self, args: dict) -> None:
        if int(np.__version__.split(".")[0]) >= 2:
            raise pb_utils.TritonModelException(
                f"tritonrt: numpy {np.__version__} is installed, but this Triton Python backend stub is built "
                "against numpy 1.x and would corrupt tensors. Install numpy<2 (pip install 'numpy<2')."
            )
        config = json.loads(args["model_config"])
        self._name = config["name"]
        self._decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self._owner_pid = int(_parameter(config, "tritonrt_owner_pid"))
        self._inputs = [spec["name"] for spec in config["input"]]
        socket_dir = pathlib.Path(_parameter(config, "tritonrt_socket_dir"))
        key = _parameter(config, "tritonrt_model_key")
        count = int(_parameter(config, "tritonrt_instances"))
        self._claim, index = self._claim_slot(socket_dir, key, count)
        self._context = zmq.Context(io_threads=1)
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(f"ipc://{socket_dir / f'{key}.{index}.sock'}")

    def _claim_slot(self, socket_dir: pathlib.Path, key: str, count: int):
        for index in range(count):
            handle = open(socket_dir / f"{key}.{index}.claim", "a")  # noqa: SIM115 - held for the stub's life
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle, index
            except BlockingIOError:
                handle.close()
        raise pb_utils.TritonModelException(
            f"tritonrt: all {count} callables of model {self._name!r} are taken by other instances; "
            "pass one inference callable per instance to Triton.bind()."
        )

    def execute(self, requests):
        batch, held = [], []  # the pb tensors own the memory their numpy views point into
        for request in requests:
            tensors = request.inputs()
            held.append(tensors)
            inputs = {tensor.name(): tensor.as_numpy() for tensor in tensors}
            parameters = json.loads(request.parameters() or "{}")
            requested = request.requested_output_names()
            batch.append((parameters, sorted(requested) if requested else None, inputs))
        self._socket.send_multipart(protocol.encode_requests(batch), copy=False)
        if self._decoupled:
            self._stream(requests)
            return None
        kind, payload = self._receive()
        if kind != protocol.OK:
            return [self._error_response(payload) for _ in requests]
        return [self._response(outputs) for outputs in payload]

    def _stream(self, requests) -> None:
        senders = [request.get_response_sender() for request in requests]
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while True:
            kind, payload = self._receive()
            if kind == protocol.PARTIAL:
                for sender, outputs in zip(senders, payload):
                    sender.send(self._response(outputs))
            elif kind == protocol.FINAL:
                for sender in senders:
                    sender.send(flags=final)
                return
            else:
                for sender in senders:
                    sender.send(self._error_response(payload), flags=final)
                return

    def _receive(self):
        while not self._socket.poll(_WAIT_SLICE_MS):
            if not _alive(self._owner_pid):
                return protocol.ERROR, (
                    f"tritonrt: the process serving model {self._name!r} (pid {self._owner_pid}) is gone"
                )
        return protocol.decode_reply(self._socket.recv_multipart(copy=False))

    @staticmethod
    def _response(outputs: dict):
        tensors = []
        for name, array in outputs.items():
            tensors.append(pb_utils.Tensor(name, np.array(array)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    @staticmethod
    def _error_response(message: str):
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))

    def finalize(self) -> None:
        self._socket.close(linger=0)
        self._context.term()
        self._claim.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
