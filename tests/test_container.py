"""The generated service's image, built and run for real: bake, stand-in base, wheelhouse, container tests.

Bakes the default project, builds (or reuses) the offline stand-in for the NGC base image
(``docker/build_stand_in_base.py``), pins one package of the lock below the index's newest (the image must
install the lock), fills the project's ``wheels/`` with ``make wheels`` and runs the project's own
``tests/test_container.py``, ``tests/test_k8s_kubelet.py`` (the image under the Kubernetes Deployment's
settings; with kubectl) and ``tests/test_rollout.py`` (a rolling replacement and a scale-up and down behind
HAProxy under load, 0 requests lost; with kubectl and HAProxy) against an image built on the stand-in with no
network.
``STAND_IN_SUITES`` picks the stand-ins, comma-separated: ``bookworm`` (Python 3.11), ``trixie`` (Python 3.13,
numpy 2), or both, the default: the two ends of NGC's range. The stand-ins have no Python backend and no shared
libpython: the generated image serves its model through tritonrt's own backend alone. The
generated tests print the image build time, the image size above the base and the time from container
start to ready; they are echoed here. The unit tests of the stand-in script's small pieces run anywhere.

The pytorch variant is not baked here: its image needs torch's wheels (several GB with the CUDA
libraries they pull from PyPI), too much for an offline wheelhouse in CI.

Run only these::

    python -m pytest tests/test_container.py
    STAND_IN_SUITES=bookworm python -m pytest tests/test_container.py   # one suite
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import bake

TEMPLATE = pathlib.Path(__file__).resolve().parents[1]
STAND_IN_SCRIPT = TEMPLATE / "docker" / "build_stand_in_base.py"
# An idna older than the lock's (pure Python, which every dependent of the image accepts).
OLDER_IDNA = "3.10"
STAND_IN_SUITES = [
    suite.strip() for suite in os.environ.get("STAND_IN_SUITES", "bookworm,trixie").split(",") if suite.strip()
]


def _load_stand_in_script():
    spec = importlib.util.spec_from_file_location("build_stand_in_base", STAND_IN_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stand_in = _load_stand_in_script()


def echo(config: pytest.Config, line: str) -> None:
    """Print ``line`` on the terminal now, even while pytest captures output."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(line, flush=True)


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def haproxy() -> str | None:
    """HAProxy's path: on PATH, or Debian's /usr/sbin (off a user's PATH)."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def run_echoed(config: pytest.Config, command: list[str], **kwargs) -> tuple[int, str]:
    """Run ``command``, echo its output line by line as it comes; return (exit status, output)."""
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs) as process:
        for line in process.stdout:
            lines.append(line)
            echo(config, "    " + line.rstrip())
    return process.returncode, "".join(lines)


# --- the stand-in script's pieces -----------------------------------------------------------------


def test_recipe_hash_changes_with_the_script_the_server_wheel_and_the_suite() -> None:
    base = stand_in.recipe_hash(b"recipe", "0.7.0", "bookworm")
    assert base == stand_in.recipe_hash(b"recipe", "0.7.0", "bookworm")
    assert base != stand_in.recipe_hash(b"recipe changed", "0.7.0", "bookworm")
    assert base != stand_in.recipe_hash(b"recipe", "0.7.1", "bookworm")
    assert base != stand_in.recipe_hash(b"recipe", "0.7.0", "trixie")


def test_each_suite_has_its_tag_and_no_libpython() -> None:
    assert stand_in.image_tag("2.51.0", "bookworm") == "tritonrt/tritonserver-cpu:2.51.0"
    assert stand_in.image_tag("2.51.0", "trixie") == "tritonrt/tritonserver-cpu:2.51.0-trixie"
    for suite in ("bookworm", "trixie"):
        assert "python3" in stand_in.packages(suite)
        assert not [name for name in stand_in.packages(suite) if name.startswith("libpython")]


def test_an_unknown_suite_is_refused_with_the_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        stand_in.main(["--suite", "jammy"])
    error = capsys.readouterr().err.replace("'", "")  # argparse quotes the choices from Python 3.12 on
    assert "invalid choice: jammy (choose from bookworm, trixie)" in error


def test_apt_mirror_reads_deb822_sources(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert stand_in.apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_apt_mirror_reads_one_line_sources_and_skips_disabled_files(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.list.disabled").write_text("deb http://wrong.example/debian bookworm main\n")
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    assert stand_in.apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_apt_mirror_of_a_bookworm_host_serves_trixie(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian trixie main\n")
    assert stand_in.apt_mirror(tmp_path) == "http://mirror.example/debian"


def test_apt_mirror_falls_back_to_debians_own(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://mirror.example/ubuntu jammy main\n")
    assert stand_in.apt_mirror(tmp_path) == stand_in.DEFAULT_MIRROR


# --- the generated project's container tests, for real --------------------------------------------


@pytest.mark.timeout(900)
def test_generated_container_tests_skip_with_the_way_out_when_the_base_cannot_be_pulled(tmp_path: pathlib.Path) -> None:
    if not docker_answers():
        pytest.skip("no Docker engine answers (`docker info` failed): start Docker to run the container tests")
    project = bake(tmp_path)
    # A registry that cannot exist (.invalid): the pull fails at once, as on an air-gapped site.
    # Outside CI (CI empty): under CI the same tests fail instead of skipping.
    env = {**os.environ, "BASE_IMAGE": "registry.invalid/tritonserver:25.10-py3",
           "PYTHONPATH": os.pathsep.join(["src", "runtime"]), "CI": ""}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "tests/test_container.py", "-p", "no:cacheprovider", "-rs", "-q"]
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0 and re.fullmatch(r"\d+ skipped in .*", summary), result.stdout[-4000:]
    reasons = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all("registry.invalid/tritonserver:25.10-py3 is not here and cannot be pulled" in line
                           and "docker/build_stand_in_base.py" in line and "BASE_IMAGE=<that tag>" in line
                           for line in reasons), reasons  # fmt: skip
    # Nothing was pulled: no line promises a download of several GB before the skip.
    assert "pulling registry.invalid" not in result.stdout, result.stdout[-4000:]


@pytest.mark.bake
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("suite", STAND_IN_SUITES)
def test_generated_container_tests_pass_on_the_stand_in_base(
    tmp_path: pathlib.Path, pytestconfig: pytest.Config, suite: str
) -> None:
    if not docker_answers():
        pytest.skip("no Docker engine answers (`docker info` failed): start Docker to run the container tests")
    project = bake(tmp_path)
    # A lock older than the package index, as every lock becomes: the image must still install the lock's version
    # (the generated test_the_image_installs_the_locked_versions compares them), not the newest in wheels/.
    lock = project / "requirements.txt"
    older, count = re.subn(r"^idna==\S+$", f"idna=={OLDER_IDNA}", lock.read_text(), flags=re.MULTILINE)
    assert count == 1, "the lock pins idna once: pick another package the image installs"
    lock.write_text(older)

    echo(pytestconfig, f"\nstand-in base image ({suite}):")
    status, output = run_echoed(pytestconfig, [sys.executable, str(STAND_IN_SCRIPT), "--suite", suite])
    assert status == 0, "building the stand-in base image failed (output above)"
    base = output.strip().splitlines()[-1]

    echo(pytestconfig, f"make wheels (for {base}) ...")
    wheels = subprocess.run(
        ["make", "wheels", f"PY={sys.executable}", f"BASE_IMAGE={base}"], cwd=project, capture_output=True, text=True
    )
    assert wheels.returncode == 0, f"make wheels failed:\n{wheels.stdout[-3000:]}\n{wheels.stderr[-3000:]}"
    echo(pytestconfig, f"    {len(list((project / 'wheels').glob('*.whl')))} wheels in wheels/")

    echo(pytestconfig, "generated container tests:")
    env = {**os.environ, "BASE_IMAGE": base, "PYTHONPATH": os.pathsep.join(["src", "runtime"])}
    # The kubelet contract (the image under the Deployment's settings) renders deploy/k8s with kubectl; the rollout
    # test (a rolling replacement and a scale-up and down behind HAProxy, under load) needs HAProxy too, which
    # make test-setup installs (under CI, a missing one fails the generated test: it says what to install).
    k8s = ["tests/test_k8s_kubelet.py"] if shutil.which("kubectl") else []
    if k8s and (haproxy() or os.environ.get("CI")):
        k8s.append("tests/test_rollout.py")
    files = ["tests/test_container.py", *k8s]
    command = [sys.executable, "-m", "pytest", *files, "-p", "no:cacheprovider", "-rs", "-v"]
    status, output = run_echoed(pytestconfig, command, cwd=project, env=env)
    summary = output.strip().splitlines()[-1]
    assert status == 0, f"the generated container tests failed: {summary}\n{output[-6000:]}"
    assert re.search(r"\b\d+ passed\b", summary) and "skipped" not in summary, summary
