"""The folders of Triton models served beside the bound ones: what a folder holds, and the mistakes refused with
the fix named (tritonrt.models.triton_models; served for real in tests/integration/test_triton_models.py)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config import Tensor
from tritonrt.models import triton_models
from tritonrt.proxy import native_files
from tritonrt.server import python_env
from tritonrt.triton import Triton, TritonConfig

X = Tensor(name="x", dtype=np.float32, shape=(-1,))


def model(folder: pathlib.Path, name: str, config: str) -> pathlib.Path:
    (folder / name / "1").mkdir(parents=True)
    (folder / name / "config.pbtxt").write_text(config)
    return folder / name


def test_a_folder_lists_its_models_with_their_backends(tmp_path):
    model(tmp_path, "onnx_model", 'backend: "onnxruntime"\nmax_batch_size: 8\n')
    model(tmp_path, "plan", 'platform: "tensorrt_plan"\n')
    env = 'backend: "python"\nparameters: { key: "EXECUTION_ENV_PATH", value: { string_value: "/envs/a" } }\n'
    model(tmp_path, "own_env", env)
    model(tmp_path, "pipeline", 'name: "pipeline"\n  backend: "python"\n')
    (tmp_path / ".git").mkdir()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "README.md").write_text("not a model")
    found = {m.name: (m.backend, m.runs_in_python_stub) for m in triton_models.scan(tmp_path, "models_dir")}
    assert found == {
        "onnx_model": ("onnxruntime", False),
        "own_env": ("python", False),
        "pipeline": ("python", True),
        "plan": ("tensorrt_plan", False),
    }


def test_the_folders_of_bound_models_are_skipped_where_asked(tmp_path):
    bound = model(tmp_path, "double", 'backend: "tritonrt"\n')
    (bound / native_files.CONNECTION_FILE).write_text("")
    assert [m.name for m in triton_models.scan(tmp_path, "TritonConfig.model_repository", skip_bound=True)] == []


def test_a_missing_folder_is_refused_when_the_triton_is_made(tmp_path):
    with pytest.raises(PyTritonValidationError, match=r"models_dir=.*missing' does not exist\. Create it"):
        Triton(config=TritonConfig(), models_dir=tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(PyTritonValidationError, match="is not a folder"):
        Triton(models_dir=tmp_path / "file")


def test_a_model_folder_without_config_is_refused_with_the_fix(tmp_path):
    (tmp_path / "detector" / "1").mkdir(parents=True)
    with pytest.raises(PyTritonValidationError, match=r"detector has no config\.pbtxt.*Add .*or move the folder"):
        Triton(models_dir=tmp_path)


def test_binding_a_name_of_the_folder_is_refused(tmp_path):
    model(tmp_path, "detector", 'backend: "onnxruntime"\n')
    triton = Triton(models_dir=tmp_path)
    with pytest.raises(PyTritonValidationError, match="Cannot bind a model named 'detector'.*rename"):
        triton.bind("detector", lambda requests: requests, [X], [X])
    triton.bind("other", lambda requests: requests, [X], [X])  # any other name binds
    triton.stop()


def test_a_name_in_both_folders_is_refused(tmp_path):
    model(tmp_path / "repository", "detector", 'backend: "onnxruntime"\n')
    model(tmp_path / "models", "detector", 'backend: "onnxruntime"\n')
    config = TritonConfig(model_repository=tmp_path / "repository")
    triton = Triton(config=config, models_dir=tmp_path / "models")
    with pytest.raises(PyTritonValidationError, match="Two Triton models are named 'detector'"):
        triton.bind("other", lambda requests: requests, [X], [X])
    triton.stop()


def test_binding_a_name_of_a_users_model_in_the_model_repository_is_refused_and_the_model_kept(tmp_path):
    """tritonrt writes bound models into PyTriton's model_repository: a Triton model of the user's there is never
    replaced by a bound one."""
    detector = model(tmp_path, "detector", 'backend: "onnxruntime"\n')
    triton = Triton(config=TritonConfig(model_repository=tmp_path))
    with pytest.raises(PyTritonValidationError, match="Cannot bind a model named 'detector'"):
        triton.bind("detector", lambda requests: requests, [X], [X])
    triton.stop()
    assert (detector / "config.pbtxt").read_text() == 'backend: "onnxruntime"\n'


def fake_server(root: pathlib.Path, *, installed_by_tritonrt: bool) -> pathlib.Path:
    stub = root / "backends" / "python" / "triton_python_backend_stub"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"\x7fELF...\x00libpython3.11.so.1.0\x00...")
    if installed_by_tritonrt:
        (root / "backends" / "python" / "stubs" / "3.11").mkdir(parents=True)
    return root


def test_the_stub_runs_in_tritonrts_environment_on_tritonrts_server_only(tmp_path, monkeypatch):
    monkeypatch.setattr(python_env, "PYTRITON_HOME", tmp_path / "cache")
    ready = python_env.environment_dir("3.11")
    ready.mkdir(parents=True)
    (ready / ".tritonrt-ready").touch()  # made earlier: nothing to install
    ngc = fake_server(tmp_path / "ngc", installed_by_tritonrt=False)
    assert python_env.stub_python_version(ngc) == "3.11"
    assert python_env.stub_environment({"PATH": "/usr/bin"}, ngc) == {"PATH": "/usr/bin"}
    ours = fake_server(tmp_path / "ours", installed_by_tritonrt=True)
    assert python_env.stub_environment({"PATH": "/usr/bin"}, ours) == {"PATH": f"{ready / 'bin'}:/usr/bin"}
