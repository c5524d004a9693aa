"""Where the model's files (weights, vocabularies, configs) are: packaged, or in a mounted directory.

By default they are the files of the package's ``weights/`` folder: package data, installed with the
package, so the same name resolves in the editable install (``make install``), in the wheel and in the
image. Weights too large for a wheel (or for the image) go on a volume mounted into the container
instead; the variable ``{{ cookiecutter.package | upper }}_MODEL_DIR`` names that directory, and then
every file is looked up there.

Example::

    weights = np.load(model_file("model.npz"))
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from {{ cookiecutter.package }}.settings import PREFIX

__all__ = ["MODEL_DIR_VARIABLE", "model_dir", "model_file"]

MODEL_DIR_VARIABLE = f"{PREFIX}MODEL_DIR"
_PACKAGED = "weights"  # the package-data folder beside this module


def model_dir() -> Path:
    """The directory of the model's files: ``MODEL_DIR_VARIABLE``'s when set, else the packaged ``weights/``.

    Raises FileNotFoundError naming the variable when it is set to something that is not a directory.
    """
    mounted = os.environ.get(MODEL_DIR_VARIABLE, "").strip()
    if mounted:
        directory = Path(mounted)
        if not directory.is_dir():
            raise FileNotFoundError(
                f"{MODEL_DIR_VARIABLE}={mounted!r} is not a directory: mount the volume that holds the "
                f"model's files there, or unset {MODEL_DIR_VARIABLE} to use the packaged weights/ folder."
            )
        return directory
    # Installed from a wheel or editable: the package's files are plain files on disk.
    return Path(str(resources.files(__package__ or __name__.rpartition(".")[0]) / _PACKAGED))


def model_file(name: str) -> Path:
    """The path of the model's file ``name`` (e.g. ``"model.npz"``) in ``model_dir()``.

    Raises FileNotFoundError saying where it looked and where to put the file.
    """
    path = model_dir() / name
    if not path.is_file():
        if os.environ.get(MODEL_DIR_VARIABLE, "").strip():
            where = f"the directory {MODEL_DIR_VARIABLE} names ({path.parent})"
        else:
            source = "src/{{ cookiecutter.package }}/weights/"
            where = (
                f"the packaged weights folder ({path.parent}): put it in {source} "
                f"and reinstall (make install; make image for the image), or set {MODEL_DIR_VARIABLE} to "
                "the directory that holds it"
            )
        raise FileNotFoundError(f"The model's file {name!r} is missing from {where}.")
    return path
