"""PyTriton 0.7 programs that print what they observed: the decorators' behaviour, the helper modules, and the
arguments PyTriton's older API reference lacks. The expected values are what PyTriton 0.7 itself prints."""

from __future__ import annotations


def test_decorators_behave_as_in_pytriton(observe):
    observed = observe("decorators.py")
    # @group_by_values calls its groups in the order of their key values as PyTriton 0.7 orders them: rows of
    # more than one axis by their bytes (little-endian numbers, length-prefixed BYTES), one-axis rows by value.
    assert observed["group_int64"] == {"calls": [[1, 1], [2], [3, 3]], "y": [0.0, 10.0, 20.0, 30.0, 40.0]}
    assert observed["group_int32_negative"]["calls"] == [[2], [-3], [-1]]
    assert observed["group_float32"]["calls"] == [[0.5], [2.0], [1.0], [-1.0]]
    assert observed["group_bytes"]["calls"] == [["a", "a"], ["b"], ["ab"]]
    assert observed["group_one_axis"]["calls"] == [[-1, -1], [2], [3]]
    for case in ("group_int32_negative", "group_float32", "group_bytes", "group_one_axis"):
        assert observed[case]["y"] == [10.0 * row for row in range(len(observed[case]["y"]))]  # rows in place
    assert observed["batch_error"] == {"type": "ValueError", "is_value_error": True}
    assert observed["first_value_context_key"] == "PyTritonBadParameterError"


def test_helper_modules_behave_as_in_pytriton(observe, ports):
    observed = observe("helpers.py", *ports)
    assert observed["version"].startswith("0.7.0")  # the PyTriton API level
    assert observed["constants"] == [8000, 8001, 8002, "triton_context", "127.0.0.1", 120, 10]
    assert observed["open_security_token"] is None and observed["server_token"] is None
    assert observed["default_security_endpoints"] == [
        "shared-memory",
        "model-repository",
        "statistics",
        "trace",
        "logging",
    ]
    assert (observed["protected_type"], observed["valid_type"]) == ("list", "set")
    assert observed["valid_endpoints"] == [
        "health", "inference", "logging", "metadata", "model-config", "model-repository", "shared-memory",
        "statistics", "trace",
    ]  # fmt: skip
    assert observed["lifecycle_default"] == [True, False]
    assert observed["from_dict"] == [8005, 1]
    assert observed["url"] == ["http://localhost:8000", "host:8001"]
    assert observed["futures_defaults"] == [128, 128]
    assert observed["model_config_defaults"] == [1, 4, True, None, False, None, None, "python"]
    for scheme in ("http", "grpc"):
        served = observed[scheme]
        assert served["missing_state"] == "UNAVAILABLE"
        assert served["config_type"] == "TritonModelConfig"
        assert served["config"] == ["add", 8, True, False]
        assert served["inputs"] == [["a", [2], "float32"], ["b", [2], "float32"]]
        assert served["outputs"] == [["sum", [2], "float32"]]
    assert observed["wait_for_server"] is None
    assert observed["infer_with_known_config"] == [4.0, 6.0]
    assert observed["stop"] == [True, False]


def test_model_state_of_a_served_model(observe, ports, runtime):
    state = observe("helpers.py", *ports)["http"]["state"]
    # PyTriton 0.7 uploads every model, and Triton's repository index does not list uploaded models, so it
    # reports UNAVAILABLE for a model it serves; tritonrt's Triton writes its models into the repository.
    assert state == ("READY" if runtime.name == "tritonrt" else "UNAVAILABLE")


def test_arguments_behave_as_in_pytriton(observe, ports):
    observed = observe("arguments.py", *ports)
    assert observed["entered_connected"] is False  # launch_triton_on_startup=False: the server starts at run()
    assert observed["warmup_calls_before_run"] == []
    assert observed["warmup_calls_after_run"] == [[[3, 2], "float32"], [[3, 2], "float32"]]  # 2 requests of 3 rows
    assert observed["run_connected"] is True
    assert observed["echo"] == [1.0, 2.0]
    assert observed["failing_warmup_model_loaded"] is True
    assert observed["serving_alive"] is True
    assert observed["stop_while_serving"] is True and observed["serve_returned"] is True
    assert observed["stopped_connected"] is False
