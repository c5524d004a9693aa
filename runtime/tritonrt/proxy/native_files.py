"""The files a model of backend ``"tritonrt"`` needs in its directory of the model repository.

- ``libtriton_tritonrt.so``: Triton looks for a backend's library in the model's version directory, then in the
  model's directory, then in its backend directory; tritonrt copies it into the model's directory, so the
  server's installation is never touched.
- ``tritonrt-connection``: where each instance's worker listens and the token it must present, mode 0600, read
  by the backend through TRITONBACKEND_ModelRepository. The model's configuration (readable by any client at
  /v2/models/<name>/config) carries nothing of this.
- ``tritonrt-served.json``: what the workers can serve (inputs, outputs, batching, at most how many instances),
  against which the backend checks a configuration changed by a load with an override, and from which it
  completes one that gives no inputs and outputs.
- ``<version>/model.py`` and ``<version>/libtriton_python.so``: a load with a config override that names no
  backend makes Triton infer one from the version folder's files (for a custom backend it only looks at the
  model's name); ``model.py`` makes it name the backend ``"python"``, and Triton then loads
  ``libtriton_python.so`` from the version folder before its own Python backend: a copy of tritonrt's library.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import shutil
from collections.abc import Sequence

__all__ = [
    "ALIAS_LIBRARY_NAME",
    "BACKEND_NAME",
    "CONNECTION_FILE",
    "INFERRED_BACKEND_FILE",
    "LIBRARY_NAME",
    "SERVED_FILE",
    "connection_text",
    "install_library",
    "library_path",
    "new_token",
    "write_connection_file",
]

BACKEND_NAME = "tritonrt"  # config.pbtxt's ``backend``
LIBRARY_NAME = "libtriton_tritonrt.so"
CONNECTION_FILE = "tritonrt-connection"
SERVED_FILE = "tritonrt-served.json"
INFERRED_BACKEND_FILE = "model.py"  # Triton infers backend "python" from it (config override without a backend)
ALIAS_LIBRARY_NAME = "libtriton_python.so"  # where Triton looks first for backend "python": tritonrt's library
_PACKAGE_LIBRARY = pathlib.Path(__file__).resolve().parent.parent / "_native" / LIBRARY_NAME
_SOURCE_TREE_LIBRARY = pathlib.Path(__file__).resolve().parents[2] / "native" / "target" / "release" / LIBRARY_NAME
_MAX_SOCKET_PATH = 107


def library_path() -> pathlib.Path:
    """The backend library: ``$TRITONRT_NATIVE_LIBRARY``, the one shipped in the package (platform wheel), or a
    build in the source tree (``cargo build --release`` in runtime/native)."""
    override = os.environ.get("TRITONRT_NATIVE_LIBRARY")
    candidates = [pathlib.Path(override)] if override else [_PACKAGE_LIBRARY, _SOURCE_TREE_LIBRARY]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"tritonrt's backend library {LIBRARY_NAME} is not installed (looked for "
        f"{', '.join(str(c) for c in candidates)}). Install tritonrt from its platform wheel, or build it: "
        "`cargo build --release` in runtime/native (needs Rust's cargo), or set TRITONRT_NATIVE_LIBRARY."
    )


def install_library(model_dir: pathlib.Path, name: str = LIBRARY_NAME) -> pathlib.Path:
    """Copy the backend library into ``model_dir`` as ``name`` (a copy, not a link: each model's copy is its own
    file, and so its own library in tritonserver).

    The copy replaces an existing library by renaming a new file over it, never by writing into it: a running
    tritonserver maps the file it loaded, and rewriting those pages in place crashes it (SIGSEGV)."""
    target = model_dir / name
    temporary = model_dir / f".{name}.{os.getpid()}"
    shutil.copyfile(library_path(), temporary)
    temporary.chmod(0o755)
    os.replace(temporary, target)
    return target


def new_token() -> str:
    """A token for a model's connection file: 64 hexadecimal digits."""
    return secrets.token_hex(32)


def connection_text(sockets: Sequence[pathlib.Path], token: str) -> str:
    """The connection file's content: socket ``i`` serves instance ``i``."""
    for index, path in enumerate(sockets):
        text = str(path)
        if not path.is_absolute() or len(text.encode()) > _MAX_SOCKET_PATH or "\n" in text or "\0" in text:
            raise ValueError(
                f"socket {index}: {text!r} must be an absolute path of at most {_MAX_SOCKET_PATH} bytes (a Unix "
                "socket's limit); choose a shorter socket directory"
            )
    lines = ["tritonrt-connection 1", f"token {token}", f"instances {len(sockets)}"]
    lines += [f"socket {index} {path}" for index, path in enumerate(sockets)]
    return "\n".join(lines) + "\n"


def write_connection_file(model_dir: pathlib.Path, sockets: Sequence[pathlib.Path], token: str) -> pathlib.Path:
    """Write ``model_dir/tritonrt-connection`` (mode 0600, replaced atomically): socket ``i`` serves instance
    ``i``."""
    text = connection_text(sockets, token)
    target = model_dir / CONNECTION_FILE
    temporary = model_dir / f".{CONNECTION_FILE}.{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(temporary, target)
    return target
