"""What both ends of the proxy share: how a proxy model instance finds its worker, the message kinds, and
the BYTES tensor codec.

The connection: tritonrt writes a :class:`ModelConnection` into each model's config.pbtxt as backend
parameters (``tritonrt_*``); the proxy model instance ``i`` reads them, connects to the worker's Unix socket
``<socket dir>/<model key>.<i>.sock`` and names its shared memory regions ``<prefix><model key>_<i>_req_<n>``,
the worker ``..._resp_<n>``.

A request message (``infer``) carries one group per request: ``extra = (parameters, requested_outputs)``
and the request's input tensors. A reply is ``ok`` (one group of outputs per request), a stream of
``partial`` replies closed by ``final`` (decoupled models), or ``error`` with the message as its note.
"""

from __future__ import annotations

import dataclasses
import pathlib
import struct
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "BYTES",
    "ERROR",
    "FINAL",
    "INFER",
    "OK",
    "PARTIAL",
    "ModelConnection",
    "decode_bytes_array",
    "encode_bytes_array",
]

BYTES = "BYTES"
INFER, OK, PARTIAL, FINAL, ERROR = "infer", "ok", "partial", "final", "error"

_LENGTH = struct.Struct("<I")

# The backend parameters of a model's config.pbtxt that carry its ModelConnection.
_SOCKET_DIR = "tritonrt_socket_dir"
_MODEL_KEY = "tritonrt_model_key"
_INSTANCES = "tritonrt_instances"
_OWNER_PID = "tritonrt_owner_pid"
_SHM_PREFIX = "tritonrt_shm_prefix"


@dataclasses.dataclass(frozen=True)
class ModelConnection:
    """Where the workers of one bound model listen, and how the shared memory of its connections is named.

    Example::

        connection = ModelConnection(pathlib.Path("/tmp/tritonrt-x"), "m1a2b3c4", 2, os.getpid(), "tritonrt_9f_")
        connection.socket_path(1)  # /tmp/tritonrt-x/m1a2b3c4.1.sock
        ModelConnection.from_backend_parameters(connection.backend_parameters()) == connection  # True
    """

    socket_dir: pathlib.Path
    model_key: str  # unique per bound model: names its sockets and regions
    instances: int  # one worker (and one proxy model instance) per inference callable
    owner_pid: int  # the user process that serves the callables
    shm_prefix: str  # the server's prefix of every shared memory region (removed with the server)

    def backend_parameters(self) -> dict[str, str]:
        """The connection as config.pbtxt ``parameters`` (string values)."""
        return {
            _SHM_PREFIX: self.shm_prefix,
            _SOCKET_DIR: str(self.socket_dir),
            _MODEL_KEY: self.model_key,
            _INSTANCES: str(self.instances),
            _OWNER_PID: str(self.owner_pid),
        }

    @classmethod
    def from_backend_parameters(cls, parameters: Mapping[str, str]) -> ModelConnection:
        """The connection read back from a model config's parameters (see :meth:`backend_parameters`)."""
        return cls(
            socket_dir=pathlib.Path(parameters[_SOCKET_DIR]),
            model_key=parameters[_MODEL_KEY],
            instances=int(parameters[_INSTANCES]),
            owner_pid=int(parameters[_OWNER_PID]),
            shm_prefix=parameters[_SHM_PREFIX],
        )

    def socket_path(self, index: int) -> pathlib.Path:
        """The Unix socket where the worker of callable ``index`` listens."""
        return self.socket_dir / f"{self.model_key}.{index}.sock"

    def request_region_prefix(self, index: int) -> str:
        """The name prefix of the regions that proxy model instance ``index`` sends requests from."""
        return f"{self.shm_prefix}{self.model_key}_{index}_req_"

    def reply_region_prefix(self, index: int) -> str:
        """The name prefix of the regions that the worker of callable ``index`` sends replies from."""
        return f"{self.shm_prefix}{self.model_key}_{index}_resp_"


def encode_bytes_array(array: np.ndarray) -> bytes:
    """Serialize an array of bytes/str objects as Triton does: a 4-byte length before each element."""
    parts = []
    for item in array.reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_bytes_array(buffer: memoryview | bytes, shape: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`encode_bytes_array`: an object array of ``bytes`` (trailing NULs kept)."""
    view = memoryview(buffer)
    count = int(np.prod(shape)) if len(shape) else 1
    result = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        result[index] = bytes(view[offset : offset + length])
        offset += length
    return result.reshape(shape)
