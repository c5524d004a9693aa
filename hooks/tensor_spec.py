"""Parse the tensors typed at the prompt: ``name:dtype:shape`` items separated by commas.

``shape`` gives the dimensions of one sample joined by ``x``; ``-1`` is a dimension of any size.
With batching on, the batch axis is not part of the shape (Triton adds it).

Examples of items: ``features:float32:-1``, ``image:uint8:3x224x224``, ``mask:bool:-1x-1``,
``text:bytes:1``.

This is the one parser of these answers: the pre-generation hook validates with it and the template
renders with it (the ``tensors`` filter of ``hooks.render``).

Example::

    specs = parse_tensors("image:uint8:3x224x224, text:bytes:1", field="inputs")
    specs[0].shape          # (3, 224, 224)
    specs[0].numpy_type     # "np.uint8"
    specs[1].shape_literal  # "(1,)"
"""

from __future__ import annotations

import dataclasses
import difflib
import keyword
import math
import re

# Prompt dtype name -> the numpy type the generated code uses. bytes is Triton's BYTES (TYPE_STRING).
DTYPES = {
    "bool": "np.bool_",
    "uint8": "np.uint8",
    "uint16": "np.uint16",
    "uint32": "np.uint32",
    "uint64": "np.uint64",
    "int8": "np.int8",
    "int16": "np.int16",
    "int32": "np.int32",
    "int64": "np.int64",
    "float16": "np.float16",
    "float32": "np.float32",
    "float64": "np.float64",
    "bytes": "np.bytes_",
}
# Names people often type for a dtype, and the name this template uses for it.
DTYPE_HINTS = {
    "float": "float32",
    "fp32": "float32",
    "fp16": "float16",
    "half": "float16",
    "double": "float64",
    "fp64": "float64",
    "int": "int64",
    "str": "bytes",
    "string": "bytes",
    "text": "bytes",
    "bytes_": "bytes",
    "object": "bytes",
    "bool_": "bool",
    "boolean": "bool",
}
MAX_TENSORS = 16
MAX_DIMS = 8
MAX_NAME_LENGTH = 32
# Fixed elements of one sample; bounds the example requests the generated client and tests build.
MAX_ELEMENTS = 2**24
RESERVED_NAMES = frozenset({"self"})  # the generated client's methods take the inputs as keywords

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_DIM = re.compile(r"-1|[1-9][0-9]*")
EXAMPLE = "features:float32:-1"


class TensorSpecError(ValueError):
    """A tensor answer that cannot be used; the message names the field, the item and the rule."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of the model, as typed at the prompt."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numpy_type(self) -> str:
        """The numpy type expression for generated code, e.g. ``"np.float32"``."""
        return DTYPES[self.dtype]

    @property
    def shape_literal(self) -> str:
        """The shape as a Python tuple literal, e.g. ``"(3, 224, 224)"`` or ``"(-1,)"``."""
        return "(" + ", ".join(str(dim) for dim in self.shape) + ("," if len(self.shape) == 1 else "") + ")"

    def shape_text(self, batched: bool = False) -> str:
        """The shape for people: ``"(any, 3)"`` for ``(-1, 3)``, ``"(batch, any, 3)"`` with ``batched``."""
        dims = (["batch"] if batched else []) + ["any" if dim == -1 else str(dim) for dim in self.shape]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"

    @property
    def is_bytes(self) -> bool:
        """True for Triton BYTES tensors (numpy ``bytes_``)."""
        return self.dtype == "bytes"

    def __str__(self) -> str:
        return f"{self.name}:{self.dtype}:{'x'.join(str(dim) for dim in self.shape)}"


def parse_tensors(text: str, field: str) -> list[TensorSpec]:
    """Parse ``text`` (the answer to ``field``) into tensor specs, or raise TensorSpecError.

    Example::

        parse_tensors("x:float32:-1,y:int64:2x2", field="outputs")[1].shape  # (2, 2)
    """
    if not isinstance(text, str) or not text.strip():
        raise TensorSpecError(
            f"{field}: {text!r} is empty; give at least one tensor as name:dtype:shape, e.g. {EXAMPLE}."
        )
    items = text.split(",")
    if len(items) > MAX_TENSORS:
        raise TensorSpecError(f"{field}: {len(items)} tensors given; at most {MAX_TENSORS} are supported.")
    specs = [parse_tensor(item, field) for item in items]
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise TensorSpecError(
            f"{field}: {text!r} repeats the name(s) {', '.join(duplicates)}; every tensor needs its own name."
        )
    return specs


def parse_tensor(item: str, field: str) -> TensorSpec:
    """Parse one ``name:dtype:shape`` item, or raise TensorSpecError naming ``field`` and the item.

    Example::

        parse_tensor(" text : bytes : 1 ", field="inputs")  # TensorSpec("text", "bytes", (1,))
    """
    parts = [part.strip() for part in item.split(":")]
    if item.strip() == "":
        raise TensorSpecError(
            f"{field}: an item is empty (a stray comma?); separate tensors with single commas, "
            f"e.g. {EXAMPLE},mask:bool:-1."
        )
    if len(parts) != 3:
        raise TensorSpecError(
            f"{field}: {item.strip()!r} is not name:dtype:shape; write each tensor as three parts "
            f"separated by colons, e.g. {EXAMPLE}."
        )
    name, dtype, shape = parts
    return TensorSpec(
        name=_check_name(name, item, field),
        dtype=_check_dtype(dtype, item, field),
        shape=_parse_shape(shape, item, field),
    )


def _check_name(name: str, item: str, field: str) -> str:
    where = f"{field}: {item.strip()!r}"
    if not _NAME.fullmatch(name) or len(name) > MAX_NAME_LENGTH:
        raise TensorSpecError(
            f"{where} has the name {name!r}; a tensor name must be 1 to {MAX_NAME_LENGTH} letters, digits and "
            "underscores starting with a letter (it becomes a Python keyword argument), e.g. image_2."
        )
    if keyword.iskeyword(name) or name in RESERVED_NAMES:
        raise TensorSpecError(
            f"{where} has the name {name!r}, which is reserved in Python code; choose another name, e.g. {name}_value."
        )
    return name


def _check_dtype(dtype: str, item: str, field: str) -> str:
    if dtype in DTYPES:
        return dtype
    hint = DTYPE_HINTS.get(dtype.lower()) or next(iter(difflib.get_close_matches(dtype, DTYPES, n=1)), None)
    suggestion = f" (did you mean {hint}?)" if hint else ""
    raise TensorSpecError(
        f"{field}: {item.strip()!r} has the unknown dtype {dtype!r}{suggestion}; use one of: {', '.join(DTYPES)}."
    )


def _parse_shape(shape: str, item: str, field: str) -> tuple[int, ...]:
    where = f"{field}: {item.strip()!r}"
    dims = [dim.strip() for dim in shape.split("x")]
    if not all(_DIM.fullmatch(dim) for dim in dims):
        raise TensorSpecError(
            f"{where} has the shape {shape!r}; a shape is dimensions joined by 'x', each a positive integer "
            "or -1 for any size, e.g. -1, 3x224x224 or -1x-1."
        )
    if len(dims) > MAX_DIMS:
        raise TensorSpecError(f"{where} has {len(dims)} dimensions; at most {MAX_DIMS} are supported.")
    values = tuple(int(dim) for dim in dims)
    if math.prod(dim for dim in values if dim > 0) > MAX_ELEMENTS:
        raise TensorSpecError(
            f"{where} has more than {MAX_ELEMENTS} fixed elements per sample; use -1 for large dimensions."
        )
    return values
