"""One check of an integer setting, shared by the model configuration's resolvers: the error names the field and
its range."""

from __future__ import annotations

import numbers
from typing import Any

from tritonrt.exceptions import PyTritonBadParameterError

__all__ = ["check_int"]


def check_int(value: Any, field: str, minimum: int, maximum: int, hint: str = "") -> int:
    """Return ``value`` as int if it is an integer (not bool) in [minimum, maximum], else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not minimum <= int(value) <= maximum:
        raise PyTritonBadParameterError(f"{field} must be an integer in [{minimum}, {maximum}], got {value!r}{hint}.")
    return int(value)
