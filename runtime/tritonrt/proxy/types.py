"""What an inference callable receives: requests, and the context that maps callables to configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np

from tritonrt.models.spec import TritonModelConfig


class Request(MutableMapping):
    """One inference request: a mapping of input name to numpy array.

    ``parameters`` holds the request parameters (and forwarded headers) sent by the client;
    ``requested_output_names`` the outputs the client asked for (None: all).
    """

    __slots__ = ("data", "parameters", "requested_output_names")

    def __init__(
        self,
        data: dict[str, np.ndarray],
        parameters: dict[str, Any] | None = None,
        requested_output_names: list[str] | None = None,
    ):
        self.data = data
        self.parameters = parameters if parameters is not None else {}
        self.requested_output_names = requested_output_names

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


class ModelConfigDict(MutableMapping):
    """Maps inference callables to their model config; bound methods map by their function and self."""

    def __init__(self):
        self._data: dict[Any, TritonModelConfig] = {}
        self._keys: list[Callable] = []

    @staticmethod
    def _key(infer_callable: Callable) -> Any:
        if hasattr(infer_callable, "__self__") and hasattr(infer_callable, "__func__"):
            return (id(infer_callable.__self__), infer_callable.__func__)
        return infer_callable

    def __getitem__(self, infer_callable: Callable) -> TritonModelConfig:
        return self._data[self._key(infer_callable)]

    def __setitem__(self, infer_callable: Callable, config: TritonModelConfig) -> None:
        self._keys.append(infer_callable)
        self._data[self._key(infer_callable)] = config

    def __delitem__(self, infer_callable: Callable) -> None:
        del self._data[self._key(infer_callable)]
        self._keys = [k for k in self._keys if self._key(k) != self._key(infer_callable)]

    def __iter__(self) -> Iterator[Callable]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._data)


@dataclasses.dataclass
class TritonContext:
    """Shared by a Triton instance and its callables; ``@triton_context`` injects it."""

    model_configs: ModelConfigDict = dataclasses.field(default_factory=ModelConfigDict)
