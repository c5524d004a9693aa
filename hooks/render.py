"""The Jinja extension the template renders with (``_extensions`` in cookiecutter.json).

Filters:

- ``tensors``: parse an ``inputs``/``outputs`` answer into ``TensorSpec`` objects (``hooks.tensor_spec``).
- ``toml_str``: a TOML basic string literal, every special character escaped.
- ``markdown``: inline Markdown text, on one line, with Markdown and HTML syntax escaped.
- ``one_line``: whitespace (newlines included) collapsed to single spaces.

Globals: ``template_root``, the absolute path of the template repository (the hooks import from it and
the post-generation hook copies ``runtime/`` and ``loadtests/`` from it).

Free text (name, description, author) reaches files only through these filters, so quotes, newlines and
template syntax in it render as plain text. Values are never rendered twice, so ``{{ ... }}`` typed at a
prompt is never executed.

Example (in a template file)::

    description = {{ cookiecutter.description | one_line | toml_str }}
    {% for tensor in cookiecutter.inputs | tensors("inputs") %}{{ tensor.name }}{% endfor %}
"""

from __future__ import annotations

import pathlib

from jinja2 import Environment
from jinja2.ext import Extension

from .tensor_spec import TensorSpec, parse_tensors

# Resolved when cookiecutter first imports this module, while the working directory is still the one
# cookiecutter was started from (its repo_dir may be a relative path such as ".").
TEMPLATE_ROOT = pathlib.Path(__file__).resolve().parent.parent

_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
# ASCII punctuation that starts inline Markdown (emphasis, code, links, images, HTML, entities, tables,
# strikethrough, closing heading marks); CommonMark lets any of it be backslash-escaped.
_MARKDOWN_SPECIAL = frozenset("\\`*_[]<>!|~&#")


def tensors(text: str, field: str = "tensors") -> list[TensorSpec]:
    """The ``tensors`` filter: ``"x:float32:-1"`` -> ``[TensorSpec("x", "float32", (-1,))]``."""
    return parse_tensors(text, field)


def toml_str(value: str) -> str:
    r"""A TOML basic string holding exactly ``value``: ``say "hi"`` becomes ``"say \"hi\""``."""
    escaped = []
    for char in str(value):
        if char in _TOML_ESCAPES:
            escaped.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def one_line(value: str) -> str:
    """Whitespace runs, newlines included, as single spaces: for a summary line or a heading."""
    return " ".join(str(value).split())


def markdown(value: str) -> str:
    r"""Text that Markdown shows as typed, on one line: ``*x* <b>`` becomes ``\*x\* \<b\>``."""
    return "".join("\\" + char if char in _MARKDOWN_SPECIAL else char for char in one_line(value))


class TemplateExtension(Extension):
    """Adds the filters and globals above to cookiecutter's Jinja environment."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.filters.update(tensors=tensors, toml_str=toml_str, one_line=one_line, markdown=markdown)
        environment.globals["template_root"] = str(TEMPLATE_ROOT)
