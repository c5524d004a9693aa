"""Triton's own models served beside the bound callables (``Triton(models_dir=...)`` and PyTriton's
``TritonConfig(model_repository=...)``), driven for real: a Python-backend ``model.py`` and a bound callable answer
through tritonclient over HTTP and gRPC, the model comes back after the supervisor restarts a killed tritonserver,
and the folder's mistakes are refused before the server starts.

The Python-backend model runs in the environment tritonrt makes for the server's Python backend stub (made once:
see tritonrt.server.python_env)."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import signal
from collections.abc import Iterator

import numpy as np
import psutil
import pytest

from tests.integration.conftest import RunningServer
from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.proxy import native_files
from tritonrt.triton import RecoveryPolicy, Triton

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))
DATA = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)

ADD_ONE_CONFIG = """\
name: "add_one"
backend: "python"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [-1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
ADD_ONE_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x + 1)]))
        return responses
"""


@batch
def double(x):
    return {"y": x * 2}


def write_add_one(folder: pathlib.Path) -> pathlib.Path:
    """A Python-backend model ``add_one`` (y = x + 1) in ``folder``, as a user writes one."""
    (folder / "add_one" / "1").mkdir(parents=True)
    (folder / "add_one" / "config.pbtxt").write_text(ADD_ONE_CONFIG)
    (folder / "add_one" / "1" / "model.py").write_text(ADD_ONE_MODEL)
    (folder / "README.md").write_text("Triton models served beside the bound ones.\n")  # files are not models
    return folder


@contextlib.contextmanager
def serving(triton: Triton) -> Iterator[RunningServer]:
    """``triton`` with ``double`` bound, started; stopped on exit."""
    server = RunningServer(triton)
    try:
        triton.bind("double", double, [X], [Y], config=ModelConfig(max_batch_size=8))
        triton.run()
        yield server
    finally:
        server.close_clients()
        triton.stop()


def assert_both_serve(server: RunningServer, protocol: str) -> None:
    assert server.infer(protocol, "add_one", {"x": DATA})["y"].tolist() == [[2.0, 3.0, 4.0]]
    assert server.infer(protocol, "double", {"x": DATA})["y"].tolist() == [[2.0, 4.0, 6.0]]


@pytest.fixture(scope="module")
def server(server_dir, free_triton_config, tmp_path_factory) -> Iterator[RunningServer]:
    models_dir = write_add_one(tmp_path_factory.mktemp("models"))
    with serving(Triton(config=free_triton_config(), models_dir=models_dir)) as running:
        yield running


def test_a_python_backend_model_serves_beside_a_bound_callable(server, protocol):
    assert_both_serve(server, protocol)
    index = server.http.get_model_repository_index(headers={"triton-access-token": server.token})
    assert {(model["name"], model.get("state")) for model in index} >= {("add_one", "READY"), ("double", "READY")}


def test_binding_the_name_of_a_served_triton_model_is_refused(server):
    with pytest.raises(PyTritonValidationError, match="the Triton model .*add_one has that name"):
        server.triton.bind("add_one", double, [X], [Y], config=ModelConfig(max_batch_size=8))
    assert server.infer("http", "add_one", {"x": DATA})["y"].tolist() == [[2.0, 3.0, 4.0]]  # still the folder's


def tritonserver_of(server: RunningServer) -> psutil.Process:
    port = f"--http-port={server.triton.config.http_port}"
    return next(p for p in psutil.Process().children(recursive=True) if port in " ".join(p.cmdline()))


def test_a_restarted_tritonserver_serves_the_triton_model_again(server_dir, free_triton_config, tmp_path, recoveries):
    models_dir = write_add_one(tmp_path / "models")
    recovery = RecoveryPolicy(backoff_s=0.1, max_backoff_s=0.2)
    triton = Triton(config=free_triton_config(), models_dir=models_dir, recovery=recovery)
    with serving(triton) as running:
        first = tritonserver_of(running)
        regions = python_backend_regions(first)
        assert regions and all(region.exists() for region in regions)
        os.kill(first.pid, signal.SIGKILL)
        recoveries.wait_recovered()
        assert tritonserver_of(running).pid != first.pid
        for protocol in ("http", "grpc"):
            assert_both_serve(running, protocol)
        # The killed server's Python backend regions are removed (its own clean-up never ran).
        assert [region for region in regions if region.exists()] == []
    assert list(pathlib.Path("/dev/shm").glob(f"tritonrt-{triton._regions_token}-*")) == []  # none of this Triton's


def python_backend_regions(server: psutil.Process) -> list[pathlib.Path]:
    """The files in /dev/shm that tritonserver maps: its Python backend's regions."""
    return sorted({pathlib.Path(m.path) for m in server.memory_maps() if m.path.startswith("/dev/shm/")})


def test_the_triton_models_in_pytritons_model_repository_serve_and_stay(
    server_dir, free_triton_config, tmp_path, caplog
):
    """PyTriton's TritonConfig(model_repository=...) is the server's repository: the Triton models in it load at
    start beside the bound ones (written into it by tritonrt), and it keeps them; the folder of a model bound by
    an earlier start, left there, is not loaded (its workers are gone)."""
    repository = write_add_one(tmp_path / "repository")
    (repository / "old" / "1").mkdir(parents=True)
    (repository / "old" / "config.pbtxt").write_text('name: "old"\nbackend: "tritonrt"\n')
    (repository / "old" / native_files.CONNECTION_FILE).write_text("")
    with (
        caplog.at_level(logging.INFO, logger="tritonrt"),
        serving(Triton(config=free_triton_config(model_repository=repository))) as running,
    ):
        assert "Serving Triton's own models beside the bound ones: add_one (python)" in caplog.text
        assert_both_serve(running, "http")
        assert not running.http.is_model_ready("old")
    assert (repository / "add_one" / "1" / "model.py").read_text() == ADD_ONE_MODEL
    assert (repository / "double" / native_files.CONNECTION_FILE).exists()  # the bound model's, as PyTriton's


def test_a_name_clash_found_at_start_stops_the_start(server_dir, free_triton_config, tmp_path):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    triton = Triton(config=free_triton_config(), models_dir=models_dir)
    try:
        triton.bind("add_one", double, [X], [Y], config=ModelConfig(max_batch_size=8))
        write_add_one(models_dir)  # the folder gains a model of that name before the start
        with pytest.raises(PyTritonValidationError, match="Cannot bind a model named 'add_one'"):
            triton.run()
        assert not triton.is_connected()
    finally:
        triton.stop()
