"""PyTriton-compatible clients of models served by Triton Inference Server (HTTP and gRPC).

Code written for ``pytriton.client`` runs after changing the import::

    from tritonrt.client import ModelClient

    with ModelClient("localhost:8000", "add") as client:
        result = client.infer_batch(a=a_batch, b=b_batch)

Exceptions live in ``tritonrt.client.exceptions``, as in ``pytriton.client.exceptions``.

Three layers, lowest last:

- the public clients: ``client`` (ModelClient, DecoupledModelClient), ``futures_client``, ``asyncio_client``
  (AsyncioModelClient, AsyncioDecoupledModelClient), and ``exceptions``;
- one core: ``_core`` (settings, the shared base, request building), ``_arguments`` (checking and naming
  the inputs of a call), ``_readiness`` (waiting for the server and the model);
- the transports behind the typed Protocols of ``_transport`` (which also holds the URL, the request and
  the mapping of failures to exceptions): ``_http`` and ``_grpc``, each with its blocking and asyncio halves.

The clients read model configs with ``tritonrt.model_config.parser`` and import nothing server-side.
"""

from tritonrt.client.asyncio_client import AsyncioDecoupledModelClient, AsyncioModelClient
from tritonrt.client.client import DecoupledModelClient, ModelClient
from tritonrt.client.futures_client import FuturesModelClient

__all__ = [
    "AsyncioDecoupledModelClient",
    "AsyncioModelClient",
    "DecoupledModelClient",
    "FuturesModelClient",
    "ModelClient",
]
