"""What a decorated callable returns: outputs as a dict, a list or tuple named after the model's outputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tritonrt.context import get_model_config
from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["convert_output"]


def convert_output(
    outputs: Mapping[str, Any] | list[Any] | tuple[Any, ...],
    wrapped: Callable[..., Any] | None = None,
    instance: Any = None,
    model_config: TritonModelConfig | None = None,
) -> dict[str, Any]:
    """Return outputs as a dict: a list or tuple is named by the model's outputs, in their order.

    Example::

        convert_output([probabilities, labels], model_config=config)  # {"probs": ..., "labels": ...}
    """
    if isinstance(outputs, Mapping):
        return dict(outputs)
    if not isinstance(outputs, (list, tuple)):
        raise PyTritonValidationError(
            f"Unsupported output type {type(outputs).__name__}: an inference callable must return a dict "
            "of output name to numpy array, or a list/tuple of arrays in the order of the model's outputs."
        )
    if model_config is None:
        if wrapped is None:
            raise PyTritonValidationError(
                "convert_output needs the model config to name list or tuple outputs: pass model_config=..., "
                "or the decorated callable (wrapped=..., instance=...) that was bound with Triton.bind."
            )
        model_config = get_model_config(wrapped, instance)
    names = [spec.name for spec in model_config.outputs]
    if len(outputs) != len(names):
        raise PyTritonValidationError(
            f"The inference callable returned {len(outputs)} outputs but model {model_config.model_name!r} "
            f"defines {len(names)} ({', '.join(names)}); return one array per output, in that order, "
            "or a dict of output name to array."
        )
    return dict(zip(names, outputs, strict=True))
