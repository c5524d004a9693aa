"""What an inference callable receives: requests, and the context that maps callables to configs."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np

from tritonrt.model_config.triton_model_config import TritonModelConfig


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
    """Maps inference callables to their model config.

    A callable is found under the same entry however it is reached: through any number of decorator
    layers (wrapt proxies or ``functools.wraps`` functions, followed through ``__wrapped__``), as a bound
    method (its object and function), and for a callable object either as the object or as its bound
    ``__call__``. Entries are keyed by identity, so unhashable callables (e.g. dataclass instances) work.

    Example::

        configs = ModelConfigDict()
        configs[model.infer] = triton_model_config
        configs[model.infer] is triton_model_config  # also from inside @batch on Model.infer
    """

    def __init__(self):
        self._data: dict[tuple, TritonModelConfig] = {}
        self._keys: dict[tuple, Callable] = {}  # holds the callables, so their ids stay theirs

    @staticmethod
    def _key(infer_callable: Callable) -> tuple:
        target, seen = infer_callable, set()
        while id(target) not in seen:
            seen.add(id(target))
            if inspect.ismethod(target):  # also true for wrapt's bound wrappers
                if getattr(target, "__name__", None) == "__call__":
                    target = target.__self__
                    continue
                return (id(target.__self__),) + ModelConfigDict._key(target.__func__)
            inner = getattr(target, "__wrapped__", None)
            if inner is None:
                break
            target = inner
        return (id(target),)

    def __getitem__(self, infer_callable: Callable) -> TritonModelConfig:
        return self._data[self._key(infer_callable)]

    def __setitem__(self, infer_callable: Callable, config: TritonModelConfig) -> None:
        key = self._key(infer_callable)
        self._keys[key] = infer_callable
        self._data[key] = config

    def __delitem__(self, infer_callable: Callable) -> None:
        key = self._key(infer_callable)
        del self._data[key]
        del self._keys[key]

    def __iter__(self) -> Iterator[Callable]:
        return iter(list(self._keys.values()))

    def __len__(self) -> int:
        return len(self._data)


@dataclasses.dataclass
class TritonContext:
    """Shared by a Triton instance and its callables; ``@triton_context`` injects it."""

    model_configs: ModelConfigDict = dataclasses.field(default_factory=ModelConfigDict)
