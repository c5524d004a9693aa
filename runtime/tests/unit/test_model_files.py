"""Unit tests: the files of a model in the repository, written into a folder or given as an upload (the same
files either way), and a model's own trace settings (``bind(trace_config=...)``)."""

from __future__ import annotations

import json
import logging
import pathlib

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor
from tritonrt.model_config.resolve import build_model_config
from tritonrt.models import repository
from tritonrt.models.trace import model_trace_settings, validate_trace_config

CONFIG = build_model_config(
    "m",
    3,
    [Tensor(name="x", dtype=np.float32, shape=(-1,)), Tensor(name="s", dtype=np.bytes_, shape=(1,), optional=True)],
    [Tensor(name="y", dtype=np.int64, shape=(2, 2))],
    ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=50), response_cache=True),
    instance_count=2,
)
CONNECTION = ([pathlib.Path("/tmp/s/m.0.sock"), pathlib.Path("/tmp/s/m.1.sock")], "ab" * 32)


def test_the_folder_and_the_upload_carry_the_same_files(tmp_path):
    model_dir = repository.write_model(tmp_path, CONFIG, *CONNECTION)
    written = {str(path.relative_to(model_dir)): path.read_bytes() for path in model_dir.rglob("*") if path.is_file()}
    assert set(written) == {
        "config.pbtxt", "3/libtriton_tritonrt.so", "3/libtriton_python.so", "3/model.py", "tritonrt-connection",
        "tritonrt-served.json",
    }  # fmt: skip
    # An override without a backend makes Triton name it "python" from 3/model.py and load 3/libtriton_python.so.
    assert written["3/libtriton_python.so"] == written["3/libtriton_tritonrt.so"]
    assert b"raise ImportError" in written["3/model.py"]
    assert json.loads(written["tritonrt-served.json"]) == {
        "version": 1, "max_instances": 2, "batching": True, "decoupled": False, "sequence": False,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]},
                  {"name": "s", "data_type": "TYPE_STRING", "dims": [1], "optional": True}],
        "output": [{"name": "y", "data_type": "TYPE_INT64", "dims": [2, 2]}],
    }  # fmt: skip
    assert (model_dir / "tritonrt-connection").stat().st_mode & 0o777 == 0o600
    assert written["tritonrt-connection"].decode().splitlines() == [
        "tritonrt-connection 1", f"token {'ab' * 32}", "instances 2", "socket 0 /tmp/s/m.0.sock",
        "socket 1 /tmp/s/m.1.sock",
    ]  # fmt: skip
    config_json, files = repository.upload_request(CONFIG, *CONNECTION)
    assert files == {f"file:{path}": content for path, content in written.items() if path != "config.pbtxt"}
    # The JSON says what config.pbtxt says: both parse to the same ModelConfig message.
    from_json = json_format.ParseDict(json.loads(config_json), model_config_pb2.ModelConfig())
    from_text = text_format.Parse(written["config.pbtxt"].decode(), model_config_pb2.ModelConfig())
    assert from_json == from_text
    assert from_json.backend == "tritonrt" and CONFIG.backend == "python"  # PyTriton's value stays in the config
    assert from_json.max_batch_size == 16 and from_json.response_cache.enable
    assert [tensor.name for tensor in from_json.input] == ["x", "s"] and from_json.input[1].optional


def test_write_model_replaces_an_older_folder(tmp_path):
    stale = tmp_path / "m" / "7" / "old.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    repository.write_model(tmp_path, CONFIG, *CONNECTION)
    assert not stale.exists() and (tmp_path / "m" / "3" / "libtriton_tritonrt.so").is_file()
    repository.remove_model(tmp_path, "m")
    assert not (tmp_path / "m").exists()


def test_per_model_trace_settings_and_server_wide_ones(caplog):
    entries = ["level=TIMESTAMPS", "level=TENSORS", "rate=10", "count=-1", "log-frequency=5"]
    server_wide = ["triton,file=/tmp/t.json", "mode=opentelemetry", "opentelemetry,resource=a=b,c=d"]
    with caplog.at_level(logging.INFO, logger="tritonrt"):
        settings = model_trace_settings([*entries, *server_wide], "m")
    assert settings == {
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_rate": "10",
        "trace_count": "-1",
        "log_frequency": "5",
    }
    assert f"{', '.join(map(repr, server_wide))} apply to the whole server" in caplog.text


@pytest.mark.parametrize("entry", ["rate", "=1", "level="])
def test_a_malformed_trace_entry_is_named(entry):
    with pytest.raises(PyTritonBadParameterError, match=f"entry {entry!r} is not '<setting>=<value>'"):
        model_trace_settings([entry], "m")


def test_trace_config_must_be_a_list_of_strings():
    assert validate_trace_config("m", None) is None
    assert validate_trace_config("m", ("rate=1",)) == ["rate=1"]
    for bad in ("rate=1", [1]):
        with pytest.raises(PyTritonBadParameterError, match="trace_config must be a list of strings"):
            validate_trace_config("m", bad)
