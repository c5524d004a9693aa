"""The proxy model: runs inside Triton's Python backend stub and forwards batches to the callable.

Triton loads it through the ``model.py`` shim that tritonrt writes into the model repository. On
``initialize`` it connects to the worker of its callable: instance ``i`` of a model to callable ``i``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils  # provided by the stub, importable only in it

from tritonrt.proxy import arena, protocol
from tritonrt.proxy.transport import SPIN_S, Channel, PeerGone

__all__ = ["TritonPythonModel"]


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
        parameters = {key: value["string_value"] for key, value in config["parameters"].items()}
        connection = protocol.ModelConnection.from_backend_parameters(parameters)
        self._owner_pid = connection.owner_pid
        index = self._instance_index(args["model_instance_name"], connection.instances)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(connection.socket_path(index)))
        self._channel = Channel(sock, connection.request_region_prefix(index), SPIN_S)
        arena.install(self._channel)  # the stub's copies of large inputs land where they are sent from

    def _instance_index(self, instance_name: str, count: int) -> int:
        """Triton names instances ``<group>_<i>``; tritonrt writes one group, so ``i`` picks the callable.

        A reloaded model's new instance gets the same name, and so the same worker, as the one it replaces
        (Triton starts the new instances before it stops the old ones).
        """
        suffix = instance_name.rpartition("_")[2]
        if not suffix.isdigit() or int(suffix) >= count:
            raise pb_utils.TritonModelException(
                f"tritonrt: model {self._name!r} has {count} inference callable(s), but Triton started instance "
                f"{instance_name!r}; pass one inference callable per instance to Triton.bind()."
            )
        return int(suffix)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        groups: list[tuple[Any, Mapping[str, Any]]] = []
        for request in requests:
            # as_numpy() arrays own their data (the stub copies each input out of Triton's shared memory, for
            # large ones into the channel's region: see arena) or keep the tensor that does alive: nothing else
            # needs holding while they are sent.
            inputs = {}
            for tensor in request.inputs():
                inputs[tensor.name()] = tensor.as_numpy()
            parameters = request.parameters()
            requested = request.requested_output_names()
            extra = (
                json.loads(parameters) if parameters and parameters != "{}" else None,
                sorted(requested) if requested else None,
            )
            groups.append((extra, inputs))
        try:
            self._channel.send(protocol.INFER, groups)
            if self._decoupled:
                self._stream(requests)
                return None
            kind, _, outputs, note = self._receive()
        except (PeerGone, OSError) as error:
            message = f"tritonrt: lost the process serving model {self._name!r} (pid {self._owner_pid}): {error}"
            if self._decoupled:
                for request in requests:
                    request.get_response_sender().send(
                        self._error_response(message), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    )
                return None
            return [self._error_response(message) for _ in requests]
        if kind != protocol.OK:
            return [self._error_response(note) for _ in requests]
        return [self._response(tensors) for tensors in outputs]

    def _receive(self) -> tuple[str, list[Any], list[dict[str, np.ndarray]], Any]:
        kind, extras, outputs, note = self._channel.recv()
        if isinstance(note, tuple):  # the last reply of a call: (note, retire)
            note, retire = note
            if retire:
                self._channel.retire_out_region()
        return kind, extras, outputs, note

    def _stream(self, requests: list[Any]) -> None:
        senders = [request.get_response_sender() for request in requests]
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while True:
            kind, _, outputs, note = self._receive()
            if kind == protocol.PARTIAL:
                for sender, tensors in zip(senders, outputs, strict=False):
                    sender.send(self._response(tensors))
            elif kind == protocol.FINAL:
                for sender in senders:
                    sender.send(flags=final)
                return
            else:
                for sender in senders:
                    sender.send(self._error_response(note), flags=final)
                return

    @staticmethod
    def _response(outputs: Mapping[str, np.ndarray]) -> Any:
        return pb_utils.InferenceResponse([pb_utils.Tensor(name, array) for name, array in outputs.items()])

    @staticmethod
    def _error_response(message: str) -> Any:
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))

    def finalize(self) -> None:
        self._channel.close()
