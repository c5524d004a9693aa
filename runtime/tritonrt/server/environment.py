"""tritonserver's environment: the server's own ``lib/`` first on ``LD_LIBRARY_PATH``.

tritonrt's models run in tritonrt's native backend (a library in each model's folder, see
:mod:`tritonrt.proxy.native_files`), so the server needs nothing of this interpreter: no libpython, no
Python backend stub, no numpy of a particular version.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["server_environment"]


def server_environment(server_dir: pathlib.Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver: ``base`` (default: this process's) with the server's ``lib/`` first on
    ``LD_LIBRARY_PATH``."""
    env = dict(os.environ if base is None else base)
    paths = [str(server_dir / "lib")]
    if env.get("LD_LIBRARY_PATH"):
        paths.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    return env
