"""Triton's own models served beside the bound callables: the folders of Triton models a ``Triton`` loads at start.

A folder of Triton models is laid out as Triton's model repository: one folder per model, named as the model,
holding its ``config.pbtxt`` and its version folders (``1/model.onnx``, ``1/model.plan``, ``1/model.pt``,
``1/model.py``, ...). Two such folders can be served:

- ``Triton(models_dir=...)``: tritonrt's own argument. The server reads it as a second model repository, as is;
  every model in it loads at start (and again after a restart of tritonserver by the supervisor).
- ``TritonConfig(model_repository=...)``: PyTriton's server repository, which tritonrt also writes its bound
  models into. The Triton models already in it load at start as well; the folders tritonrt wrote for bound
  models (they hold a ``tritonrt-connection`` file) are not Triton models of the user's and are skipped.

:func:`scan` lists a folder's models and checks it: a missing folder, a model folder without ``config.pbtxt``
and one name in two places each raise an error that says how to fix it.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Iterable

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.models.repository import CONFIG_FILE
from tritonrt.proxy import native_files

__all__ = ["TritonModel", "check_bound_name", "check_unique", "scan"]

_SKIPPED = {"__pycache__"}
_BACKEND = re.compile(r'^\s*backend\s*:\s*"([^"]*)"', re.MULTILINE)
_PLATFORM = re.compile(r'^\s*platform\s*:\s*"([^"]*)"', re.MULTILINE)
_EXECUTION_ENV = re.compile(r'"EXECUTION_ENV_PATH"')


@dataclasses.dataclass(frozen=True)
class TritonModel:
    """A Triton model found in a folder: its name (the folder's), folder, and what its config names as backend
    (``"python"``, ``"onnxruntime"``, ...; ``platform`` when it gives no backend; ``""`` when neither)."""

    name: str
    path: pathlib.Path
    backend: str
    own_python_environment: bool  # the config sets the Python backend's EXECUTION_ENV_PATH

    @property
    def runs_in_python_stub(self) -> bool:
        """A Python-backend model running in the environment the stub finds (no EXECUTION_ENV_PATH of its own)."""
        return self.backend == "python" and not self.own_python_environment


def _model(folder: pathlib.Path) -> TritonModel:
    text = (folder / CONFIG_FILE).read_text(errors="replace")
    backend = _BACKEND.search(text) or _PLATFORM.search(text)
    return TritonModel(folder.name, folder, backend.group(1) if backend else "", bool(_EXECUTION_ENV.search(text)))


def scan(folder: pathlib.Path, what: str, *, skip_bound: bool = False) -> list[TritonModel]:
    """The Triton models in ``folder`` (``what`` names the folder's setting in errors), sorted by name.

    Files and hidden folders at its top are ignored (a README, a .gitkeep). With ``skip_bound``, the folders of
    bound models that tritonrt wrote there are skipped. Raises PyTritonValidationError for a missing folder or a
    model folder without config.pbtxt.
    """
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise PyTritonValidationError(
            f"{what}={str(folder)!r} {problem}. Create it (it may be empty) or give the folder that holds your "
            f"Triton models: one folder per model, named as the model, with its {CONFIG_FILE} and version folders "
            "(e.g. my_model/config.pbtxt and my_model/1/model.onnx)."
        )
    models = []
    for entry in sorted(folder.iterdir()):
        if not entry.is_dir() or entry.name.startswith(".") or entry.name in _SKIPPED:
            continue
        if skip_bound and (entry / native_files.CONNECTION_FILE).exists():
            continue
        if not (entry / CONFIG_FILE).is_file():
            raise PyTritonValidationError(
                f"{entry} has no {CONFIG_FILE}: every folder in {what} ({folder}) is a Triton model and needs "
                f'one. Add {entry / CONFIG_FILE} (at least `backend: "<backend>"`, e.g. "onnxruntime" or '
                f'"python", and the inputs and outputs; see Triton\'s model configuration docs), or move the '
                f"folder out of {folder}."
            )
        models.append(_model(entry))
    return models


def check_unique(groups: Iterable[tuple[str, list[TritonModel]]]) -> None:
    """Raise PyTritonValidationError when one model name is in two of the folders (``(setting, models)`` pairs):
    Triton refuses to load a model found in two repositories."""
    seen: dict[str, TritonModel] = {}
    for _, models in groups:
        for model in models:
            first = seen.setdefault(model.name, model)
            if first is not model:
                raise PyTritonValidationError(
                    f"Two Triton models are named {model.name!r}: {first.path} and {model.path}. A name serves one "
                    "model: rename one of the folders (a model's name is its folder's) or remove it."
                )


def check_bound_name(name: str, models: Iterable[TritonModel]) -> None:
    """Raise PyTritonValidationError when a callable is bound under the name of a Triton model served beside it."""
    for model in models:
        if model.name == name:
            raise PyTritonValidationError(
                f"Cannot bind a model named {name!r}: the Triton model {model.path} has that name, and a name "
                "serves one model. Bind the callable under another name, or rename the Triton model's folder "
                "(and the `name` in its config.pbtxt, if it has one)."
            )
