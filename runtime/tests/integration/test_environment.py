"""What tritonrt needs of the server's installation and of this interpreter: a tritonserver, nothing more.

Models run in tritonrt's native backend (a library in each model's folder), so neither the Python backend, its
stub for this Python version, a shared libpython nor numpy 1.x is needed: a server without the Python backend
serves, and the install takes a wheel without a stub for this Python.
"""

from __future__ import annotations

import io
import os
import pathlib
import sys
import zipfile

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.server import install
from tritonrt.server.command import server_command
from tritonrt.triton import Triton, TritonConfig

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))


@batch
def double(x):
    return {"y": x * 2}


def server_without_python_backend(server_dir: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
    """A server folder with the installed server's bin/ and lib/ (links) and an empty backends/."""
    root.mkdir()
    for name in ("bin", "lib"):
        (root / name).symlink_to(server_dir / name)
    (root / "backends").mkdir()
    return root


@pytest.mark.integration
def test_a_server_without_the_python_backend_serves(server_dir, tmp_path, monkeypatch, free_triton_config):
    bare = server_without_python_backend(server_dir, tmp_path / "server")
    monkeypatch.setenv("TRITONRT_SERVER_DIR", str(bare))
    assert install.find_server_dir() == bare
    with Triton(config=free_triton_config()) as triton:
        triton.bind("double", double, [X], [Y], config=ModelConfig(max_batch_size=4))
        from tritonrt.client import ModelClient

        with ModelClient(f"127.0.0.1:{triton.config.http_port}", "double") as client:
            result = client.infer_sample(x=np.array([1.0, 2.0], dtype=np.float32))
    assert result["y"].tolist() == [2.0, 4.0]


def test_the_command_line_has_no_python_backend_settings(tmp_path):
    command = server_command(tmp_path, TritonConfig(), tmp_path / "repository", [])
    assert not [argument for argument in command if "python" in argument], command


def test_a_server_folder_needs_only_an_executable_tritonserver(tmp_path):
    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\nexit 1\n")
    assert not install.is_server_dir(tmp_path)
    binary.chmod(0o755)
    assert install.is_server_dir(tmp_path)


def fake_wheel(path: pathlib.Path, stub_versions: list[str]) -> pathlib.Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pytriton/tritonserver/bin/tritonserver", "#!/bin/sh\n")
        archive.writestr("pytriton/tritonserver/backends/python/libtriton_python.so", "")
        archive.writestr("nvidia_pytriton.libs/libexample.so", "")
        for version in stub_versions:
            archive.writestr(f"pytriton/tritonserver/python_backend_stubs/{version}/triton_python_backend_stub", "")
    path.write_bytes(buffer.getvalue())
    return path


def test_install_takes_a_wheel_without_a_stub_for_this_python(tmp_path):
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheel = fake_wheel(tmp_path / "nvidia_pytriton-0.7.0-py3-none-any.whl", ["3.8"])
    dest = install.extract_server(wheel, tmp_path / "server", running)
    assert install.is_server_dir(dest)
    assert (dest / "lib" / "libexample.so").is_file()
    assert not (dest / "backends" / "python" / "triton_python_backend_stub").exists()
    with_stub = install.extract_server(wheel, tmp_path / "server-3.8", "3.8")
    assert (with_stub / "backends" / "python" / "triton_python_backend_stub").is_file()


def test_install_can_leave_the_python_backend_out(tmp_path):
    """install-server --without-python-backend (the stand-in base, the GPU check's carry): no Python backend, no
    libpython bundled for its stub; the rest of the server and an empty backends/ kept."""
    wheel = tmp_path / "nvidia_pytriton-0.7.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member in ("pytriton/tritonserver/bin/tritonserver",
                       "pytriton/tritonserver/backends/python/libtriton_python.so",
                       "pytriton/tritonserver/caches/local/libtritoncache_local.so",
                       "pytriton/tritonserver/python_backend_stubs/3.13/triton_python_backend_stub",
                       "nvidia_pytriton.libs/libtritonserver-717102f0.so",
                       "nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0"):  # fmt: skip
            archive.writestr(member, "")
    dest = install.extract_server(wheel, tmp_path / "server", "3.13", python_backend=False)
    left = sorted(str(path.relative_to(dest)) for path in dest.rglob("*") if path.is_file())
    assert left == [
        "bin/tritonserver",
        "caches/local/libtritoncache_local.so",
        "lib/libtritonserver-717102f0.so",
        install.MARKER,
    ]
    assert (dest / "backends").is_dir()  # tritonserver's --backend-directory, empty
    with_backend = install.extract_server(wheel, tmp_path / "full", "3.13")
    assert (with_backend / "backends" / "python" / "triton_python_backend_stub").is_file()
    assert (with_backend / "lib" / "libpython3-419a3a08.13.so.1.0").is_file()


def test_a_wheel_without_a_server_is_explained(tmp_path):
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/README", "")
    with pytest.raises(Exception, match="holds no tritonserver") as caught:
        install.extract_server(wheel, tmp_path / "server", "3.11")
    assert "TRITONRT_SERVER_WHEEL" in str(caught.value)
    assert os.listdir(tmp_path) == ["other.whl"]  # nothing extracted, no staging folder left
