"""Parsing of Triton server URLs: ``grpc://host:port``, ``http://host:port`` or ``host[:port]`` (HTTP)."""

from __future__ import annotations

import dataclasses
import urllib.parse

from tritonrt.client.exceptions import PyTritonClientInvalidUrlError

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
_DEFAULT_PORTS = {"http": DEFAULT_HTTP_PORT, "grpc": DEFAULT_GRPC_PORT}
_EXAMPLES = "e.g. 'localhost', 'http://localhost:8000' or 'grpc://localhost:8001'"


@dataclasses.dataclass(frozen=True)
class TritonUrl:
    """A parsed server address.

    Example::

        >>> TritonUrl.from_url("grpc://localhost")
        TritonUrl(scheme='grpc', hostname='localhost', port=8001)
        >>> TritonUrl.from_url("10.0.0.5:9000").with_scheme
        'http://10.0.0.5:9000'
    """

    scheme: str
    hostname: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> TritonUrl:
        """Parse ``url``; a missing scheme means HTTP and a missing port the scheme's default port.

        Raises:
            PyTritonClientInvalidUrlError: if ``url`` is not a string, has another scheme than
                http or grpc, has no host, a path, or a bad port.
        """
        if not isinstance(url, str):
            raise PyTritonClientInvalidUrlError(f"Invalid url {url!r}: the url must be a string, {_EXAMPLES}.")
        text = url.strip()
        if "://" in text:
            scheme = text.split("://", 1)[0].lower()
            if scheme not in _DEFAULT_PORTS:
                raise PyTritonClientInvalidUrlError(
                    f"Invalid url {url!r}: scheme {scheme!r} is not supported; use http:// or grpc://, {_EXAMPLES}."
                )
        else:
            scheme = "http"
            text = f"http://{text}"
        parts = urllib.parse.urlsplit(text)
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise PyTritonClientInvalidUrlError(
                f"Invalid url {url!r}: give only the scheme, host and port of the server, without a path, {_EXAMPLES}."
            )
        if not parts.hostname:
            raise PyTritonClientInvalidUrlError(f"Invalid url {url!r}: it names no host, {_EXAMPLES}.")
        try:
            port = parts.port
        except ValueError as error:
            raise PyTritonClientInvalidUrlError(
                f"Invalid url {url!r}: the port must be a number from 0 to 65535, {_EXAMPLES}."
            ) from error
        return cls(scheme=scheme, hostname=parts.hostname, port=port or _DEFAULT_PORTS[scheme])

    @property
    def without_scheme(self) -> str:
        """``host:port`` (IPv6 hosts in brackets), the form tritonclient expects."""
        host = f"[{self.hostname}]" if ":" in self.hostname else self.hostname
        return f"{host}:{self.port}"

    @property
    def with_scheme(self) -> str:
        """``scheme://host:port``."""
        return f"{self.scheme}://{self.without_scheme}"
