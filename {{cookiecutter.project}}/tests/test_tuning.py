{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
"""The tuning file (``tuning.json``, written by ``make tune APPLY=1``): read, checked, and served.

Unit tests of ``tuning.load`` and of the settings it sets the defaults of; one integration test starts
the service with a tuning file and reads the configuration Triton serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import PACKAGE, start_service

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.settings import PREFIX, Settings, SettingsError
from {{ cookiecutter.package }}.tuning import FILE_VARIABLE, Tuning, TuningError, load


def tuning_file(tmp_path: Path, **settings: object) -> dict[str, str]:
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    return {FILE_VARIABLE: str(path)}


def test_every_key_is_read(tmp_path: Path) -> None:
    every = {"max_batch_size": 16, "max_queue_delay_us": 500, "preferred_batch_sizes": [4, 16]}
    environ = tuning_file(tmp_path, **every, instances=2, workers="process")
    assert load(environ) == Tuning(16, 500, (4, 16), 2, "process")


def test_an_empty_file_means_no_tuning() -> None:
    assert load({FILE_VARIABLE: os.devnull}) == Tuning()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size must be a whole number from 1"),
        ({"instances": 65}, "instances must be a whole number from 1 to 64"),
        ({"max_queue_delay_us": "100"}, "max_queue_delay_us must be a whole number from 0"),
        ({"preferred_batch_sizes": [0]}, "preferred_batch_sizes must list whole numbers >= 1"),
        ({"workers": "fibre"}, "workers must be one of thread, process"),
        ({"max_batch": 8}, "unknown key(s) max_batch"),
    ],
)
def test_a_bad_value_names_the_file_and_the_rule(tmp_path: Path, settings: dict, message: str) -> None:
    with pytest.raises(TuningError) as error:
        load(tuning_file(tmp_path, **settings))
    assert str(tmp_path / "tuning.json") in str(error.value) and message in str(error.value)


def test_bad_json_and_a_missing_named_file_are_explained(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(TuningError, match="not valid JSON"):
        load({FILE_VARIABLE: str(broken)})
    with pytest.raises(TuningError, match="no such file"):
        load({FILE_VARIABLE: str(tmp_path / "absent.json")})


def test_the_tuning_sets_the_defaults_and_the_variables_still_win(tmp_path: Path) -> None:
    environ = tuning_file(tmp_path, instances=3, max_queue_delay_us=0)
    settings = Settings.from_env(environ)
    assert (settings.instances, settings.max_queue_delay_us) == (3, 0)
    settings = Settings.from_env(environ | {PREFIX + "INSTANCES": "2", PREFIX + "MAX_QUEUE_DELAY_US": "50"})
    assert (settings.instances, settings.max_queue_delay_us) == (2, 50)
    with pytest.raises(SettingsError, match="instances must be"):
        Settings.from_env(tuning_file(tmp_path, instances=0))


def test_the_spec_reads_the_batch_size(tmp_path: Path) -> None:
    code = f"from {PACKAGE} import spec; print(spec.MAX_BATCH_SIZE, spec.PREFERRED_BATCH_SIZES)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **tuning_file(tmp_path, max_batch_size=8, preferred_batch_sizes=[4, 8])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
{%- if batching %}
    assert result.stdout.split(maxsplit=1) == ["8", "[4, 8]\n"]
{%- else %}
    assert result.stdout.startswith("0 ")  # a model that does not batch keeps max_batch_size 0
{%- endif %}


@pytest.mark.integration
def test_the_service_serves_the_tuned_settings(tmp_path: Path) -> None:
{%- if batching %}
    tuned = {"max_batch_size": 8, "max_queue_delay_us": 700, "preferred_batch_sizes": [4, 8], "instances": 2}
{%- else %}
    tuned = {"instances": 2}
{%- endif %}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(tuned), encoding="utf-8")
    service = start_service(tmp_path / "service.log", TUNING_FILE=str(path))
    try:
        address = f"{service.http_url}/v2/models/{spec.MODEL_NAME}/config"
        with urllib.request.urlopen(address, timeout=30) as response:
            config = json.load(response)
    finally:
        assert service.stop() == 0, service.output()
    assert sum(int(group.get("count", 1)) for group in config["instance_group"]) == 2
{%- if batching %}
    assert config["max_batch_size"] == 8
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 700
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
{%- endif %}
