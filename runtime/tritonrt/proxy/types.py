"""What an inference callable receives and returns: requests (input name -> numpy array) and responses."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from tritonrt.constants import SEQUENCE_END, SEQUENCE_START

__all__ = ["BatchCancellation", "Cancellation", "Request", "Requests", "Response", "Responses"]


class Cancellation(Protocol):
    """Where a request learns of its cancellation: the indices, in its batch, of the requests cancelled so far."""

    def cancelled(self) -> set[int]: ...


class BatchCancellation:
    """The requests of one batch ask their connection about that batch only: ``cancelled_in(seq)``."""

    __slots__ = ("_cancelled_in", "_seq")

    def __init__(self, cancelled_in: Callable[[int], set[int]], seq: int):
        self._cancelled_in, self._seq = cancelled_in, seq

    def cancelled(self) -> set[int]:
        return self._cancelled_in(self._seq)


class Request(MutableMapping[str, np.ndarray]):
    """One inference request: a mapping of input name to numpy array.

    ``parameters`` holds the request parameters (and forwarded headers) sent by the client;
    ``requested_output_names`` the outputs the client asked for (None: all); ``sequence_id`` the request's
    correlation id (an int or a str; None when it has none) and ``flags`` Triton's request flags, read through
    ``sequence_start`` and ``sequence_end`` (see :class:`tritonrt.model_config.SequenceBatcher`).
    ``span`` the request's OpenTelemetry span when Triton traced it and a tracer is set (see
    :mod:`tritonrt.proxy.telemetry`), else None. ``is_cancelled()`` says whether the client
    cancelled the request (or went away) since it was sent.
    """

    __slots__ = (
        "_cancellation",
        "_index",
        "data",
        "flags",
        "parameters",
        "requested_output_names",
        "sequence_id",
        "span",
    )

    def __init__(
        self,
        data: dict[str, np.ndarray],
        parameters: dict[str, Any] | None = None,
        requested_output_names: list[str] | None = None,
        *,
        sequence_id: int | str | None = None,
        flags: int = 0,
        cancellation: Cancellation | None = None,
        index: int = 0,
    ):
        self.data = data
        self.parameters = parameters if parameters is not None else {}
        self.requested_output_names = requested_output_names
        self.sequence_id = sequence_id
        self.flags = flags
        self._cancellation = cancellation
        self._index = index
        self.span: Any = None

    @property
    def sequence_start(self) -> bool:
        """True for the first request of a sequence (the client's ``sequence_start``)."""
        return bool(self.flags & SEQUENCE_START)

    @property
    def sequence_end(self) -> bool:
        """True for the last request of a sequence (the client's ``sequence_end``): drop the sequence's state."""
        return bool(self.flags & SEQUENCE_END)

    def is_cancelled(self) -> bool:
        """Whether Triton cancelled this request (its client cancelled it or went away): stop working on it; what
        is returned for it is dropped. Cheap enough to ask between steps of a long computation."""
        return self._cancellation is not None and self._index in self._cancellation.cancelled()

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
