"""Validate the answers to the prompts before anything is generated (run by ``pre_gen_project.py``).

One small check per answer; each returns the problems it found as messages that name the field, the
value and the rule. ``validate`` runs them all, so a user sees every problem at once.

Example::

    problems = validate({"project": "My Service", ...})
    # ["project: 'My Service' is not a valid project slug: use lowercase letters, ..."]
"""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Mapping
from typing import Any

from .tensor_spec import TensorSpecError, parse_tensors

CHOICES = {"framework": ("numpy", "pytorch"), "streaming": ("no", "yes")}
FREE_TEXT = ("project_name", "description", "author")
MAX_FREE_TEXT = 500
MAX_BATCH_SIZE = 65536
# Lengths that keep every generated line within the line-length limit.
MAX_PROJECT = 40
MAX_PACKAGE = 32
MAX_MODEL_NAME = 40
STREAM_SUFFIX = "_stream"  # the streaming model is served as <model_name>_stream

# Import names the generated package must not take: the project imports these, or ships them itself.
TAKEN_PACKAGES = frozenset(
    {
        "tritonrt",
        "loadtests",
        "tests",
        "numpy",
        "torch",
        "tritonclient",
        "locust",
        "gevent",
        "grpc",
        "zmq",
        "wrapt",
        "pytest",
        "testcontainers",
        "matplotlib",
        "setuptools",
        "pip",
    }
)

_SLUG = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
_PACKAGE = re.compile(r"[a-z][a-z0-9_]*")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_BATCH = re.compile(r"0|[1-9][0-9]*")
# A Docker image reference: [registry[:port]/]path[:tag][@sha256:digest], path in lowercase components.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)


def check_project(value: str) -> list[str]:
    """The repository/directory slug: also the distribution and Docker image name."""
    if _SLUG.fullmatch(value) and len(value) <= MAX_PROJECT:
        return []
    return [
        f"project: {value!r} is not a valid project slug: use 1 to {MAX_PROJECT} lowercase letters and digits, "
        "starting with a letter, with single dashes or underscores between words (e.g. my-service)."
    ]


def check_package(value: str) -> list[str]:
    """The Python import name of the generated service."""
    if not _PACKAGE.fullmatch(value) or len(value) > MAX_PACKAGE or keyword.iskeyword(value):
        return [
            f"package: {value!r} is not a valid Python package name: use 1 to {MAX_PACKAGE} lowercase letters, "
            "digits and underscores, starting with a letter, not a Python keyword (e.g. my_service)."
        ]
    if value in TAKEN_PACKAGES or value in sys.stdlib_module_names:
        return [
            f"package: {value!r} is already the name of a module the service imports (standard library or a "
            "dependency); importing it would pick the wrong one. Choose another name (e.g. "
            f"{value}_service)."
        ]
    return []


def check_model_name(value: str, streaming: str) -> list[str]:
    """The Triton model name (a directory in the model repository; part of every request URL)."""
    limit = MAX_MODEL_NAME - (len(STREAM_SUFFIX) if streaming == "yes" else 0)
    if _MODEL_NAME.fullmatch(value) and len(value) <= limit:
        return []
    streamed = (
        f" (with streaming, {STREAM_SUFFIX!r} is appended for the streaming model)" if limit < MAX_MODEL_NAME else ""
    )
    return [
        f"model_name: {value!r} is not a name Triton accepts here: use 1 to {limit} letters, digits, dots, "
        f"underscores and dashes, starting with a letter or digit{streamed} (e.g. resnet50_v1.2)."
    ]


def check_free_text(field: str, value: str) -> list[str]:
    """Free text (name, description, author): any characters render safely, but it must be real text."""
    problems = []
    if field == "project_name" and not value.strip():
        problems.append(f"{field}: {value!r} is empty; give the project a name (e.g. My Service).")
    if len(value) > MAX_FREE_TEXT:
        problems.append(f"{field}: the answer is {len(value)} characters long; keep it to {MAX_FREE_TEXT}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(f"{field}: {value!r} is not valid Unicode text (is the terminal's encoding UTF-8?); retype it.")
    return problems


def check_choice(field: str, value: str) -> list[str]:
    """One of a fixed set of options."""
    options = CHOICES[field]
    if value in options:
        return []
    return [f"{field}: {value!r} is not an option; choose one of: {', '.join(options)}."]


def check_max_batch_size(value: str) -> list[str]:
    """0 turns batching off; otherwise the largest batch Triton's dynamic batcher forms."""
    if _BATCH.fullmatch(value) and int(value) <= MAX_BATCH_SIZE:
        return []
    return [
        f"max_batch_size: {value!r} is out of range: use a whole number from 0 (batching off) to "
        f"{MAX_BATCH_SIZE}, e.g. 64."
    ]


def check_triton_image(value: str) -> list[str]:
    """The base image reference; it lands in the Makefile and docker build arguments."""
    if _IMAGE.fullmatch(value) and len(value) <= 255:
        return []
    return [
        f"triton_image: {value!r} is not a Docker image reference: use registry/path:tag with lowercase "
        "path components and no spaces or quotes (e.g. nvcr.io/nvidia/tritonserver:25.10-py3)."
    ]


def check_tensors(inputs: str, outputs: str) -> list[str]:
    """Both tensor lists parse, and no name is both an input and an output."""
    problems, names = [], {}
    for field, text in (("inputs", inputs), ("outputs", outputs)):
        try:
            names[field] = {spec.name for spec in parse_tensors(text, field)}
        except TensorSpecError as error:
            problems.append(str(error))
    if not problems:
        shared = sorted(names["inputs"] & names["outputs"])
        if shared:
            problems.append(
                f"outputs: {', '.join(shared)} is also an input name; give inputs and outputs distinct names "
                "(the client returns outputs as fields and takes inputs as arguments)."
            )
    return problems


def validate(answers: Mapping[str, Any]) -> list[str]:
    """Every problem with ``answers`` (the cookiecutter context), in prompt order; empty when all is well."""
    text = {key: str(value) for key, value in answers.items() if not key.startswith("_")}
    problems: list[str] = []
    for field in FREE_TEXT:
        problems += check_free_text(field, text[field])
    problems += check_project(text["project"])
    problems += check_package(text["package"])
    problems += check_model_name(text["model_name"], text["streaming"])
    problems += check_choice("framework", text["framework"])
    problems += check_tensors(text["inputs"], text["outputs"])
    problems += check_max_batch_size(text["max_batch_size"])
    problems += check_choice("streaming", text["streaming"])
    problems += check_triton_image(text["triton_image"])
    return problems


def main(answers: Mapping[str, Any]) -> int:
    """Print every problem to stderr; return the exit status for the hook (0 when the answers are good)."""
    problems = validate(answers)
    if not problems:
        return 0
    print(f"Cannot generate the project: {len(problems)} answer(s) need fixing.", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1
