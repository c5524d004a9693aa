"""What tritonrt needs of the server's installation and of this interpreter: a tritonserver, nothing more.

Models run in tritonrt's native backend (a library in each model's folder), so neither the Python backend, its
stub for this Python version, a shared libpython nor numpy 1.x is needed: a server without the Python backend
serves, and the install takes a wheel without a stub for this Python. The server is installed once for every
Python (one cache folder per wheel version), with the stub of each Python the wheel has, for plain
Python-backend models.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import sys
import zipfile

import numpy as np
import pytest

from tritonrt.__main__ import main
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
    """A small stand-in for the nvidia-pytriton wheel: its members' names, each stub holding its version."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member in ("pytriton/tritonserver/bin/tritonserver",
                       "pytriton/tritonserver/backends/python/libtriton_python.so",
                       "pytriton/tritonserver/backends/python/triton_python_backend_utils.py",
                       "pytriton/tritonserver/caches/local/libtritoncache_local.so",
                       "nvidia_pytriton.libs/libtritonserver-717102f0.so",
                       "nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0"):  # fmt: skip
            archive.writestr(member, "")
        for version in stub_versions:
            archive.writestr(
                f"pytriton/tritonserver/python_backend_stubs/{version}/triton_python_backend_stub", version
            )
    path.write_bytes(buffer.getvalue())
    return path


def marker(server: pathlib.Path) -> dict:
    return json.loads((server / install.MARKER).read_text())


def test_the_cache_is_one_folder_per_wheel_version_for_every_python(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "PYTRITON_HOME", tmp_path)
    assert install.cache_server_dir() == tmp_path / "server" / install.WHEEL_VERSION
    monkeypatch.delenv("TRITONRT_SERVER_DIR", raising=False)
    monkeypatch.setattr(install, "NGC_SERVER_DIR", tmp_path / "no-ngc")
    monkeypatch.setenv("TRITONRT_SERVER_WHEEL", str(fake_wheel(tmp_path / "w.whl", ["3.8", "3.11"])))
    assert main(["install-server"]) == 0
    assert install.find_server_dir() == tmp_path / "server" / install.WHEEL_VERSION
    assert marker(install.cache_server_dir())["stubs"] == ["3.8", "3.11"]
    assert main(["install-server"]) == 0  # already installed: says so, whatever the Python


def test_install_leaves_the_old_per_python_folders_of_the_cache_alone(tmp_path, monkeypatch):
    """The cache folder held one server per Python (py<X.Y>/) before: unused now, perhaps still running."""
    monkeypatch.setattr(install, "PYTRITON_HOME", tmp_path)
    old = tmp_path / "server" / install.WHEEL_VERSION / "py3.11" / "bin" / "tritonserver"
    old.parent.mkdir(parents=True)
    old.write_text("old")
    monkeypatch.setenv("TRITONRT_SERVER_WHEEL", str(fake_wheel(tmp_path / "w.whl", ["3.11"])))
    assert main(["install-server"]) == 0
    assert main(["install-server", "--force", "--without-python-backend"]) == 0
    assert old.read_text() == "old"
    cache = install.cache_server_dir()
    assert install.is_server_dir(cache) and marker(cache)["stubs"] == []
    assert sorted(path.name for path in cache.iterdir()) == [
        "backends", "bin", "caches", "lib", "py3.11", install.MARKER,
    ]  # fmt: skip
    assert not (cache / "backends" / "python").exists()  # the reinstall replaced the server's folders


def test_install_extracts_the_stub_of_every_python_and_this_ones_at_the_default_place(tmp_path):
    wheel = fake_wheel(tmp_path / "nvidia_pytriton-0.7.0-py3-none-any.whl", ["3.10", "3.8", "3.13", "3.11"])
    dest = install.extract_server(wheel, tmp_path / "server", "3.11")
    for version in ("3.8", "3.10", "3.11", "3.13"):
        stub = install.python_stub(dest, version)
        assert stub == dest / "backends" / "python" / "stubs" / version / "triton_python_backend_stub"
        assert stub.read_text() == version and os.access(stub, os.X_OK)
    assert (dest / "backends" / "python" / "triton_python_backend_stub").read_text() == "3.11"
    assert (dest / "backends" / "python" / "triton_python_backend_utils.py").is_file()
    assert (dest / "lib" / "libpython3-419a3a08.13.so.1.0").is_file()  # the 3.13 stub's libpython
    assert marker(dest)["stubs"] == ["3.8", "3.10", "3.11", "3.13"]
    assert marker(dest)["default_stub"] == "3.11"
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert install.python_stub(dest) == install.python_stub(dest, running)


def test_install_takes_a_wheel_without_a_stub_for_this_python(tmp_path):
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheel = fake_wheel(tmp_path / "nvidia_pytriton-0.7.0-py3-none-any.whl", ["3.8"])
    dest = install.extract_server(wheel, tmp_path / "server", running)
    assert install.is_server_dir(dest)
    assert (dest / "lib" / "libtritonserver-717102f0.so").is_file()
    assert not (dest / "backends" / "python" / "triton_python_backend_stub").exists()
    assert install.python_stub(dest, "3.8").is_file()
    assert marker(dest)["stubs"] == ["3.8"]
    assert marker(dest)["default_stub"] is None


def test_install_can_leave_the_python_backend_out(tmp_path):
    """install-server --without-python-backend (the stand-in base, the GPU check's carry): no Python backend, no
    stub, no libpython bundled for the 3.13 stub; the rest of the server and an empty backends/ kept."""
    wheel = fake_wheel(tmp_path / "nvidia_pytriton-0.7.0-py3-none-any.whl", ["3.11", "3.13"])
    dest = install.extract_server(wheel, tmp_path / "server", "3.13", python_backend=False)
    left = sorted(str(path.relative_to(dest)) for path in dest.rglob("*") if path.is_file())
    assert left == [
        "bin/tritonserver",
        "caches/local/libtritoncache_local.so",
        "lib/libtritonserver-717102f0.so",
        install.MARKER,
    ]
    assert (dest / "backends").is_dir()  # tritonserver's --backend-directory, empty
    assert marker(dest)["stubs"] == [] and marker(dest)["default_stub"] is None


def test_the_default_stub_cannot_be_asked_for_without_the_python_backend(capsys):
    with pytest.raises(SystemExit):
        main(["install-server", "--python-version", "3.11", "--without-python-backend"])
    assert "give one of them" in capsys.readouterr().err


def test_a_wheel_without_a_server_is_explained(tmp_path):
    wheel = tmp_path / "other.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/README", "")
    with pytest.raises(Exception, match="holds no tritonserver") as caught:
        install.extract_server(wheel, tmp_path / "server", "3.11")
    assert "TRITONRT_SERVER_WHEEL" in str(caught.value)
    assert os.listdir(tmp_path) == ["other.whl"]  # nothing extracted, no staging folder left
