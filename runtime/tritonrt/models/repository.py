"""The files that make up a bound model in a Triton model repository, written into a folder or uploaded.

``<name>/config.pbtxt`` (``backend: "tritonrt"``), ``<name>/<version>/libtriton_tritonrt.so`` (tritonrt's
native backend: Triton looks for a backend's library in the version folder first, so the server's own
installation is never touched), ``<name>/tritonrt-connection`` (where the workers listen and the token the
instances present), ``<name>/tritonrt-served.json`` (what the workers can serve, checked by the backend when a
load with a config override changes the model) and ``<name>/<version>/model.py`` with
``<name>/<version>/libtriton_python.so`` (so that an override without a backend still loads tritonrt's library;
see :mod:`tritonrt.proxy.native_files`).

:func:`write_model` writes them into a repository folder (a local server, or a shared folder) and
:func:`upload_request` gives them in the form of the repository API's load with overrides (the config as
JSON, the other files as ``file:<path>``), which is how a RemoteTriton puts its models into a server that
reads no folder of ours. Triton writes uploaded files into a fresh folder of mode 0700, which the backend
accepts in place of the connection file's own mode 0600.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Sequence

from tritonrt.model_config.dtypes import to_triton_config_type
from tritonrt.model_config.pbtxt import render_pbtxt
from tritonrt.model_config.sequence import SequenceBatcher
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy import native_files

__all__ = [
    "CONFIG_FILE",
    "INFERRED_BACKEND_TEXT",
    "config_json",
    "remove_model",
    "served_text",
    "upload_request",
    "write_model",
]

CONFIG_FILE = "config.pbtxt"
INFERRED_BACKEND_TEXT = '''"""Written by tritonrt: tritonrt's backend serves this model, not Triton's Python backend.

A load with a config override that names no backend makes Triton infer one from this folder's files: this file
makes it name the backend "python", and Triton then loads libtriton_python.so from this folder before its own
Python backend. That library is a copy of tritonrt's (libtriton_tritonrt.so), so the model's workers serve it
under the new configuration. Nothing in this file runs.
"""

raise ImportError("this folder belongs to a model served by tritonrt's backend, not by Triton's Python backend")
'''


def _config_text(config: TritonModelConfig) -> str:
    return render_pbtxt(config, backend=native_files.BACKEND_NAME)


def write_model(
    repository: pathlib.Path, config: TritonModelConfig, sockets: Sequence[pathlib.Path], token: str
) -> pathlib.Path:
    """Create (or replace) the model's folder in ``repository``; return it."""
    model_dir = repository / config.model_name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    version_dir = model_dir / str(config.model_version)
    version_dir.mkdir(parents=True)
    (model_dir / CONFIG_FILE).write_text(_config_text(config))
    native_files.install_library(version_dir)
    native_files.install_library(version_dir, native_files.ALIAS_LIBRARY_NAME)
    (version_dir / native_files.INFERRED_BACKEND_FILE).write_text(INFERRED_BACKEND_TEXT)
    (model_dir / native_files.SERVED_FILE).write_text(served_text(config, len(sockets)))
    native_files.write_connection_file(model_dir, sockets, token)
    return model_dir


def _tensor(spec: TensorSpec) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": spec.name,
        "data_type": to_triton_config_type(spec.dtype, spec.name),
        "dims": [int(dim) for dim in spec.shape],
    }
    if spec.optional:
        entry["optional"] = True
    return entry


def served_text(config: TritonModelConfig, max_instances: int) -> str:
    """What the model's workers can serve, as the backend reads it (``tritonrt-served.json``): the inputs and
    outputs (entries of Triton's JSON config), whether the callable takes a batch axis, streams (decoupled) or
    keeps sequences, and at most how many instances its workers serve (one per bound callable)."""
    served = {
        "version": 1,
        "max_instances": max_instances,
        "batching": bool(config.batching and config.max_batch_size > 0),
        "decoupled": bool(config.decoupled),
        "sequence": isinstance(config.batcher, SequenceBatcher),
        "input": [_tensor(spec) for spec in config.inputs],
        "output": [_tensor(spec) for spec in config.outputs],
    }
    return json.dumps(served) + "\n"


def config_json(config: TritonModelConfig) -> str:
    """The model's config.pbtxt as the JSON that the repository API's load takes (parsed by Triton's own
    ``ModelConfig`` message, so both forms say the same)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    message = text_format.Parse(_config_text(config), model_config_pb2.ModelConfig())
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True))


def upload_request(
    config: TritonModelConfig, sockets: Sequence[pathlib.Path], token: str
) -> tuple[str, dict[str, bytes]]:
    """``(config, files)`` for loading the model with overrides: the config as JSON and every other file under
    ``file:<path>``."""
    version = config.model_version
    library = native_files.library_path().read_bytes()
    files = {
        f"file:{version}/{native_files.LIBRARY_NAME}": library,
        f"file:{version}/{native_files.ALIAS_LIBRARY_NAME}": library,
        f"file:{version}/{native_files.INFERRED_BACKEND_FILE}": INFERRED_BACKEND_TEXT.encode(),
        f"file:{native_files.SERVED_FILE}": served_text(config, len(sockets)).encode(),
        f"file:{native_files.CONNECTION_FILE}": native_files.connection_text(sockets, token).encode(),
    }
    return config_json(config), files


def remove_model(repository: pathlib.Path, model_name: str) -> None:
    """Delete the model's folder from the repository, if there."""
    shutil.rmtree(repository / model_name, ignore_errors=True)
