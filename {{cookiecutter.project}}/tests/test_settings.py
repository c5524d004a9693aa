{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""Unit tests of the settings: defaults, parsing, and a clear error for every bad value."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PACKAGE

from {{ cookiecutter.package }}.settings import PREFIX, Settings, SettingsError, triton_models_dir

TOKEN = "s3cret-token_0123456789"


def env(**variables: str) -> dict[str, str]:
    """The variables named, and no tuning file (tuning.json, if `make tune` wrote one, stays out)."""
    return {PREFIX + "TUNING_FILE": os.devnull} | {PREFIX + name: value for name, value in variables.items()}


def test_defaults_when_nothing_is_set() -> None:
    assert Settings.from_env(env()) == Settings()
    assert Settings() == Settings(
        8000, 8001, 8002, "INFO", {{ 0 if pytorch else 1 }}, 100, None, 30, False, "127.0.0.1", 3, "{{ "process" if pytorch else "thread" }}", 60
    )


def test_every_variable_is_read() -> None:
    settings = Settings.from_env(
        env(
            HTTP_PORT="9000",
            GRPC_PORT="9001",
            METRICS_PORT="9002",
            LOG_LEVEL="debug",
            INSTANCES="3",
            MAX_QUEUE_DELAY_US="0",
            ACCESS_TOKEN=TOKEN,
            EXIT_TIMEOUT_S="5",
            REQUIRE_TOKEN="yes",
            BIND_ADDRESS="0.0.0.0",
            RESTARTS="0",
            WORKERS="{{ "Thread" if pytorch else "Process" }}",
            EXECUTION_TIMEOUT_S="0",
            THREADS="4",
        )
    )
    expected = Settings(9000, 9001, 9002, "DEBUG", 3, 0, TOKEN, 5, True, "0.0.0.0", 0, "{{ "thread" if pytorch else "process" }}", 0)
    assert settings == dataclasses.replace(expected, threads=4)


def test_tracing_is_off_by_default_and_on_with_opentelemetrys_variables() -> None:
    from {{ cookiecutter.package }}.service import trace_config

    assert Settings.from_env(env()).traces_endpoint is None
    assert trace_config(Settings()) is None
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/", "OTEL_SERVICE_NAME": "svc"}
    settings = Settings.from_env(env(TRACE_RATE="10") | otel)
    assert settings.traces_endpoint == "http://collector:4318/v1/traces"
    assert (settings.trace_service_name, settings.trace_rate) == ("svc", 10)
    assert trace_config(settings) == [
        "mode=opentelemetry",
        "opentelemetry,url=http://collector:4318/v1/traces",
        "opentelemetry,resource=service.name=svc",
        "rate=10",
        "level=TIMESTAMPS",
    ]
    traces = otel | {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/otlp"}
    assert Settings.from_env(env() | traces).traces_endpoint == "https://traces.example/otlp"


def test_a_bad_traces_endpoint_names_the_variable_and_the_rule() -> None:
    with pytest.raises(SettingsError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT='collector:4318'.*http://"):
        Settings.from_env(env() | {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"})


def test_empty_values_mean_the_default() -> None:
    assert Settings.from_env(env(HTTP_PORT="", LOG_LEVEL="  ", ACCESS_TOKEN="")) == Settings()


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("HTTP_PORT", "http", "whole number from 1 to 65535"),
        ("GRPC_PORT", "70000", "whole number from 1 to 65535"),
        ("METRICS_PORT", "0", "whole number from 1 to 65535"),
        ("METRICS_PORT", "-1", "whole number from 1 to 65535"),
        ("LOG_LEVEL", "LOUD", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("INSTANCES", "65", "whole number from 0 to 64"),
        ("INSTANCES", "1.5", "whole number from 0 to 64"),
        ("WORKERS", "fibers", "one of thread, process"),
        ("EXECUTION_TIMEOUT_S", "-1", "whole number from 0 to 86400"),
        ("MAX_QUEUE_DELAY_US", "10000001", "whole number from 0 to 10000000"),
        ("EXIT_TIMEOUT_S", "soon", "whole number from 0 to 3600"),
        ("RESTARTS", "-1", "whole number from 0 to 100"),
        ("REQUIRE_TOKEN", "maybe", "true or false"),
        ("TRITON_MODELS_DIR", "/no/such/folder", "no such folder"),
        ("BIND_ADDRESS", "localhost", "must be an IP address, e.g. 127.0.0.1"),
        ("BIND_ADDRESS", "10.0.0.300", "must be an IP address"),
        ("THREADS", "0", "whole number from 1 to 1024"),
    ],
)
def test_a_bad_value_names_the_variable_the_value_and_the_rule(name: str, value: str, rule: str) -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env(env(**{name: value}))
    assert f"{PREFIX}{name}={value!r}" in str(error.value)
    assert rule in str(error.value)


@pytest.mark.parametrize("token", ["short", "has space in the token", "comma,separated,token", "x" * 257])
def test_a_bad_access_token_is_rejected_without_being_shown(token: str) -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env(env(ACCESS_TOKEN=token))
    assert f"{PREFIX}ACCESS_TOKEN" in str(error.value)
    assert "16 to 256 characters" in str(error.value)
    assert token not in str(error.value)


def test_requiring_the_token_needs_one_set() -> None:
    with pytest.raises(SettingsError, match=f"{PREFIX}REQUIRE_TOKEN=true needs {PREFIX}ACCESS_TOKEN"):
        Settings.from_env(env(REQUIRE_TOKEN="true"))
    assert Settings.from_env(env(REQUIRE_TOKEN="true", ACCESS_TOKEN=TOKEN)).require_token


def test_triton_models_come_from_models_of_the_working_directory_or_the_folder_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert triton_models_dir(Settings.from_env(env())) is None  # no models/ here: none served
    (tmp_path / "models").mkdir()
    assert triton_models_dir(Settings.from_env(env())) == str(tmp_path / "models")
    (tmp_path / "elsewhere").mkdir()
    named = Settings.from_env(env(TRITON_MODELS_DIR="elsewhere"))
    assert triton_models_dir(named) == str(tmp_path / "elsewhere")


def test_ipv6_addresses_are_accepted() -> None:
    assert Settings.from_env(env(BIND_ADDRESS="::1")).bind_address == "::1"


def test_the_ports_must_differ() -> None:
    with pytest.raises(SettingsError, match="ports must differ") as error:
        Settings.from_env(env(HTTP_PORT="9000", GRPC_PORT="9000"))
    assert f"{PREFIX}GRPC_PORT=9000" in str(error.value)


def test_the_service_exits_2_on_a_bad_setting_and_says_which() -> None:
    result = subprocess.run(
        [sys.executable, "-m", PACKAGE],
        env={**os.environ, **env(INSTANCES="many")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"{PREFIX}INSTANCES='many'" in result.stderr
