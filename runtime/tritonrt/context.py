"""The callable's context: which model config each bound inference callable was bound with.

``Triton.bind`` attaches a :class:`TritonContext` to every callable it binds (:func:`bind_triton_context`) and
registers the callable's model config in it; decorators read it back from inside any layer
(:func:`get_triton_context`, :func:`get_model_config`), and ``@triton_context`` hands it to the callable.

Example::

    context = TritonContext()
    bind_triton_context(infer, context)
    context.model_configs[infer] = triton_model_config
    get_model_config(infer, None) is triton_model_config  # True
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from tritonrt.constants import TRITON_CONTEXT_FIELD_NAME
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = [
    "TRITON_CONTEXT_ATTRIBUTE",
    "TRITON_CONTEXT_FIELD_NAME",
    "ModelConfigDict",
    "TritonContext",
    "bind_triton_context",
    "get_model_config",
    "get_triton_context",
]

TRITON_CONTEXT_ATTRIBUTE = "__triton_context__"
"""The attribute of a bound callable (or its object) that holds its TritonContext."""


class ModelConfigDict(MutableMapping[Callable[..., Any], TritonModelConfig]):
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

    def __init__(self) -> None:
        self._data: dict[tuple[int, ...], TritonModelConfig] = {}
        self._keys: dict[tuple[int, ...], Callable[..., Any]] = {}  # holds the callables, so their ids stay theirs

    @staticmethod
    def _key(infer_callable: Callable[..., Any]) -> tuple[int, ...]:
        target: Any = infer_callable
        seen: set[int] = set()
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

    def __getitem__(self, infer_callable: Callable[..., Any]) -> TritonModelConfig:
        return self._data[self._key(infer_callable)]

    def __setitem__(self, infer_callable: Callable[..., Any], config: TritonModelConfig) -> None:
        key = self._key(infer_callable)
        self._keys[key] = infer_callable
        self._data[key] = config

    def __delitem__(self, infer_callable: Callable[..., Any]) -> None:
        key = self._key(infer_callable)
        del self._data[key]
        del self._keys[key]

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter(list(self._keys.values()))

    def __len__(self) -> int:
        return len(self._data)


@dataclasses.dataclass
class TritonContext:
    """Shared by a Triton instance and its callables; ``@triton_context`` injects it."""

    model_configs: ModelConfigDict = dataclasses.field(default_factory=ModelConfigDict)


def bind_triton_context(infer_callable: Callable[..., Any], context: TritonContext) -> None:
    """Attach ``context`` to an inference callable so its decorators can find it (used by ``Triton.bind``).

    The context goes on the object of a bound method, on a callable object itself, and on a function and
    every layer it wraps (``__wrapped__``). The caller registers the model config in
    ``context.model_configs[infer_callable]``.

    Example::

        context = TritonContext()
        bind_triton_context(infer, context)
        context.model_configs[infer] = triton_model_config
    """
    targets: list[object]
    if inspect.ismethod(infer_callable):  # also true for a wrapt-decorated method
        targets = [infer_callable.__self__]
    else:
        targets = []
        layer: Any = infer_callable
        while layer is not None and all(layer is not target for target in targets):
            targets.append(layer)
            layer = getattr(layer, "__wrapped__", None)
    for target in targets:
        try:
            setattr(target, TRITON_CONTEXT_ATTRIBUTE, context)
        except (AttributeError, TypeError) as error:
            raise PyTritonBadParameterError(
                f"Cannot attach the Triton context to inference callable {infer_callable!r} ({error}). "
                "Bind a function, a bound method or an object that accepts new attributes (no __slots__)."
            ) from error


def get_triton_context(wrapped: Callable[..., Any], instance: Any) -> TritonContext:
    """Return the TritonContext attached by ``Triton.bind`` to the callable (``instance`` for methods).

    Use it in custom ``wrapt`` decorators; ``@triton_context`` passes it to the callable instead.

    Example::

        @wrapt.decorator
        def log_model_name(wrapped, instance, args, kwargs):
            print(get_triton_context(wrapped, instance).model_configs[wrapped].model_name)
            return wrapped(*args, **kwargs)
    """
    owner = instance if instance is not None else wrapped
    context = getattr(owner, TRITON_CONTEXT_ATTRIBUTE, None)
    if not isinstance(context, TritonContext):
        raise PyTritonValidationError(
            f"Inference callable {wrapped!r} has no Triton context: a decorator that needs the model "
            "config (@triton_context, @fill_optionals, @first_value, @pad_batch, or list/tuple outputs) can "
            "only run after the callable was bound with Triton.bind(...). Bind it before calling it."
        )
    return context


def get_model_config(wrapped: Callable[..., Any], instance: Any) -> TritonModelConfig:
    """Return the TritonModelConfig the callable was bound with, from inside any decorator layer.

    Example::

        @wrapt.decorator
        def check_batching(wrapped, instance, args, kwargs):
            assert get_model_config(wrapped, instance).batching
            return wrapped(*args, **kwargs)
    """
    model_configs = get_triton_context(wrapped, instance).model_configs
    for key in (wrapped, instance):  # a helper method of a bound object finds the object's config
        if key is not None and key in model_configs:
            return model_configs[key]
    raise PyTritonValidationError(
        f"No model config is registered for inference callable {wrapped!r}. Bind this callable (or the "
        "object it is a method of) with Triton.bind(...) before calling it."
    )
