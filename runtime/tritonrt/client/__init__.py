"""PyTriton-compatible clients of models served by Triton Inference Server (HTTP and gRPC).

Code written for ``pytriton.client`` runs after changing the import::

    from tritonrt.client import ModelClient

    with ModelClient("localhost:8000", "add") as client:
        result = client.infer_batch(a=a_batch, b=b_batch)

Exceptions live in ``tritonrt.client.exceptions``, as in ``pytriton.client.exceptions``.
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
