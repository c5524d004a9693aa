"""The access token's header: how a request opens Triton's restricted endpoints (TritonSecurityConfig).

Defined once for both sides: the clients send it, and the server is told to expect it. It sits in the
lowest layer because the server's configuration must not import the clients (their transports load grpc and
aiohttp), nor the clients the server.

Example::

    access_headers("grpc", "s3cret")  # {"triton-grpc-protocol-triton-access-token": "s3cret"}
"""

from __future__ import annotations

__all__ = ["GRPC_ACCESS_HEADER", "TRITON_ACCESS_HEADER", "access_headers"]

TRITON_ACCESS_HEADER = "triton-access-token"
"""The header (HTTP) that carries the access token; tritonserver's restriction flags name it."""
GRPC_ACCESS_HEADER = f"triton-grpc-protocol-{TRITON_ACCESS_HEADER}"
"""The same over gRPC: Triton's gRPC frontend reads restricted-protocol headers under this prefix."""


def access_headers(scheme: str, token: str | None) -> dict[str, str]:
    """The access-token header in the form the protocol (``"http"`` or ``"grpc"``) needs; none without a token."""
    if token is None:
        return {}
    return {GRPC_ACCESS_HEADER if scheme == "grpc" else TRITON_ACCESS_HEADER: token}
