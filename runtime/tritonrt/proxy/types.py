"""What an inference callable receives and returns: requests (input name -> numpy array) and responses."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

__all__ = ["Request", "Requests", "Response", "Responses"]


class Request(MutableMapping[str, np.ndarray]):
    """One inference request: a mapping of input name to numpy array.

    ``parameters`` holds the request parameters (and forwarded headers) sent by the client;
    ``requested_output_names`` the outputs the client asked for (None: all); ``span`` the request's
    OpenTelemetry span when Triton traced it and a tracer is set (see :mod:`tritonrt.proxy.telemetry`), else None.
    """

    __slots__ = ("data", "parameters", "requested_output_names", "span")

    def __init__(
        self,
        data: dict[str, np.ndarray],
        parameters: dict[str, Any] | None = None,
        requested_output_names: list[str] | None = None,
    ):
        self.data = data
        self.parameters = parameters if parameters is not None else {}
        self.requested_output_names = requested_output_names
        self.span: Any = None

    def traced_span(self, span_name: str, **kwargs: Any) -> AbstractContextManager[Any]:
        """A context manager running its block in a child span of this request's span (untraced without one)."""
        from tritonrt.proxy.telemetry import traced_span

        return traced_span(self, span_name, **kwargs)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.data[name] = value

    def __delitem__(self, name: str) -> None:
        del self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Request(data={self.data!r}, parameters={self.parameters!r})"


Requests = list[Request]
Response = dict[str, np.ndarray]
Responses = list[Response]
