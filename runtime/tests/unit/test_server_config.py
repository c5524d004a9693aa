"""Unit tests: TritonConfig from the environment and from a dict, TritonSecurityConfig's token rules, the lifecycle
policy's choice (PyTriton 0.7's behaviour, with the differences the runtime README lists)."""

from __future__ import annotations

import logging
import pathlib

import pytest

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.server.config import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    TritonConfig,
    TritonSecurityConfig,
    merge_with_environment,
)
from tritonrt.server.lifecycle import (
    DefaultTritonLifecyclePolicy,
    TritonLifecyclePolicy,
    VertextAILifecyclePolicy,
    choose_policy,
)

PREFIX = "PYTRITON_TRITON_CONFIG_"


@pytest.fixture(autouse=True)
def no_config_variables(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith(PREFIX):
            monkeypatch.delenv(key)


def test_from_env_converts_to_the_fields_types(monkeypatch):
    monkeypatch.setenv(PREFIX + "GRPC_PORT", "45436")
    monkeypatch.setenv(PREFIX + "ALLOW_METRICS", "false")
    monkeypatch.setenv(PREFIX + "LOG_FILE", "/tmp/triton.log")
    config = TritonConfig.from_env()
    assert (config.grpc_port, config.allow_metrics, config.log_file) == (45436, False, pathlib.Path("/tmp/triton.log"))


def test_from_env_takes_list_entries_indexed_as_pytriton_07_and_separated_by_semicolons(monkeypatch):
    monkeypatch.setenv(PREFIX + "CACHE_CONFIG_1", "local,size=2048")
    monkeypatch.setenv(PREFIX + "CACHE_CONFIG_0", "local,enable=true")
    monkeypatch.setenv(PREFIX + "METRICS_CONFIG", "summary_latencies=true;counter_latencies=false")
    config = TritonConfig.from_env()
    assert config.cache_config == ["local,enable=true", "local,size=2048"]  # in index order
    assert config.metrics_config == ["summary_latencies=true", "counter_latencies=false"]


def test_from_env_ignores_unknown_variables_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv(PREFIX + "NO_SUCH_FIELD", "1")
    with caplog.at_level(logging.WARNING, logger="tritonrt"):
        assert TritonConfig.from_env() == TritonConfig()
    assert "no field 'no_such_field'" in caplog.text


def test_from_dict_converts_strings_and_keeps_typed_values(caplog):
    with caplog.at_level(logging.WARNING, logger="tritonrt"):
        config = TritonConfig.from_dict(
            {"http_port": "8005", "log_verbose": 1, "allow_grpc": "false", "trace_config": ("rate=1",), "bogus": 2}
        )
    assert (config.http_port, config.log_verbose, config.allow_grpc) == (8005, 1, False)
    assert config.trace_config == ["rate=1"]
    assert "Ignoring bogus" in caplog.text


def test_from_dict_names_a_bad_value():
    with pytest.raises(PyTritonValidationError, match="from_dict: http_port='eighty'.*use an integer"):
        TritonConfig.from_dict({"http_port": "eighty"})


def test_explicit_values_win_over_the_environment(monkeypatch):
    monkeypatch.setenv(PREFIX + "HTTP_PORT", "9000")
    monkeypatch.setenv(PREFIX + "GRPC_PORT", "9001")
    merged = merge_with_environment(TritonConfig(http_port=8500))
    assert (merged.http_port, merged.grpc_port) == (8500, 9001)


def test_security_defaults_protect_the_admin_endpoints_with_a_random_token():
    first, second = TritonSecurityConfig(), TritonSecurityConfig()
    assert first.restricted_endpoints == DEFAULT_PROTECTED_ENDPOINTS
    assert first.restricted_endpoints is not DEFAULT_PROTECTED_ENDPOINTS  # a copy per config
    assert first.access_token and first.access_token != second.access_token
    assert isinstance(DEFAULT_PROTECTED_ENDPOINTS, list) and isinstance(VALID_TRITON_ENDPOINTS, set)


def test_no_restricted_endpoints_means_no_token_and_no_restriction():
    open_config = TritonSecurityConfig(restricted_endpoints=[])
    assert open_config.access_token is None
    assert open_config.restriction_flag_value() is None
    given = TritonSecurityConfig(access_token="kept", restricted_endpoints=[])
    assert given.access_token == "kept" and given.restriction_flag_value() is None


def test_unknown_endpoints_are_named_with_the_valid_ones():
    with pytest.raises(PyTritonValidationError, match="'bogus'.*valid: health, inference, logging"):
        TritonSecurityConfig(restricted_endpoints=["inference", "bogus"])


@pytest.mark.parametrize(
    ("given", "vertex_ai", "expected"),
    [
        (None, False, DefaultTritonLifecyclePolicy),
        (None, True, VertextAILifecyclePolicy),
        (TritonLifecyclePolicy(launch_triton_on_startup=False), True, TritonLifecyclePolicy(False, False)),
    ],
)
def test_lifecycle_policy_choice(given, vertex_ai, expected):
    assert choose_policy(given, vertex_ai) == expected
    assert DefaultTritonLifecyclePolicy == TritonLifecyclePolicy(True, False)
    assert VertextAILifecyclePolicy == TritonLifecyclePolicy(False, True)
