"""The runtime's named values, under PyTriton 0.7's names (``pytriton.constants``); each is defined here once.

Example::

    from tritonrt.constants import DEFAULT_HTTP_PORT, TRITON_CONTEXT_FIELD_NAME

    url = f"http://localhost:{DEFAULT_HTTP_PORT}"   # tritonserver's default HTTP port, 8000
"""

from __future__ import annotations

import os
import pathlib

__all__ = [
    "CREATE_TRITON_CLIENT_TIMEOUT_S",
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_TRITON_STARTUP_TIMEOUT_S",
    "PYTRITON_HOME",
    "SEQUENCE_END",
    "SEQUENCE_START",
    "TRITON_CONTEXT_FIELD_NAME",
    "TRITON_LOCAL_IP",
    "TRITON_PYTHON_BACKEND_INTERPRETER_DIRNAME",
]

DEFAULT_HTTP_PORT = 8000
"""tritonserver's HTTP port when TritonConfig sets none (also the port a URL without one means)."""
DEFAULT_GRPC_PORT = 8001
"""tritonserver's gRPC port when TritonConfig sets none."""
DEFAULT_METRICS_PORT = 8002
"""tritonserver's metrics port when TritonConfig sets none."""
TRITON_LOCAL_IP = "127.0.0.1"
"""The address tritonrt calls a server on that listens on all interfaces."""
TRITON_CONTEXT_FIELD_NAME = "triton_context"
"""The keyword argument under which ``@triton_context`` passes the TritonContext to the callable."""
DEFAULT_TRITON_STARTUP_TIMEOUT_S = 120
"""How long a start (or a RemoteTriton's connect) waits for the server, in seconds; the variable
``TRITONRT_STARTUP_TIMEOUT_S`` overrides it for Triton's start."""
CREATE_TRITON_CLIENT_TIMEOUT_S = 10
"""The network timeout of the calls a RemoteTriton makes while it stops (unloading its models)."""
TRITON_PYTHON_BACKEND_INTERPRETER_DIRNAME = "python_backend_interpreter"
"""PyTriton's folder name for a Python interpreter bundled with the server. tritonrt bundles none (its native
backend needs no Python in the server); the name is kept for programs that import it."""
PYTRITON_HOME = pathlib.Path(
    os.path.expanduser(os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")), "tritonrt"
).resolve()
"""Where tritonrt keeps what it installs (the server under ``server/``): ``$XDG_CACHE_HOME/tritonrt``, by
default ``~/.cache/tritonrt``. PyTriton's counterpart is ``~/.cache/pytriton`` (``$PYTRITON_HOME``)."""

# Triton's request flags (TRITONSERVER_RequestFlag), as a request carries them to the callable.
SEQUENCE_START = 1
SEQUENCE_END = 2
