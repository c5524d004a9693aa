"""Bake the template for each supported combination of answers and check the generated project.

Every combination must render completely, parse, pass ruff, and pass its own test suite, run in a
subprocess against a real tritonserver. The projects share this test environment (``make venv``
installs the dependencies once); each project and its vendored runtime are installed, without
dependencies, into a folder of their own. ``-m bake`` selects the slow suite runs, ``-m "not bake"``
skips them.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, bake, bake_interactively
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canonical

from hooks.render import markdown, one_line

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# The supported combinations: name -> answers over the defaults.
VARIANTS = {
    "defaults": {},
    "pytorch": {"framework": "pytorch"},
    "streaming": {"streaming": "yes"},
    "bytes-input": {"inputs": "text:bytes:1", "outputs": "length:int64:1,echo:bytes:1"},
    "image-input": {"inputs": "image:uint8:3x224x224", "outputs": "logits:float32:10"},
    "several-tensors": {
        "inputs": "a:float32:-1,b:int32:2x2,mask:bool:-1x-1",
        "outputs": "x:float64:-1,y:float16:3,flag:bool:1,label:bytes:2",
    },
    "batching-off": {"max_batch_size": "0", "inputs": "x:float32:-1x3", "outputs": "y:float32:-1,z:uint8:2"},
    "batching-off-streaming": {"max_batch_size": "0", "streaming": "yes", "framework": "pytorch"},
    # The longest names and shapes the prompts accept: every generated line stays within the limit.
    "long-names": {
        "project": "x" * 40,
        "package": "p" * 32,
        "model_name": "m" * 33,
        "streaming": "yes",
        "inputs": f"{'i' * 32}:float16:-1x2x-1x2x-1x2x-1x2,{'j' * 32}:uint64:-1x-1x-1x-1x-1x-1x-1x-1",
        "outputs": f"{'o' * 32}:bytes:-1x-1x-1x-1x-1x-1x-1x-1",
    },
}
# Files rendered from {{cookiecutter.project}}/ (vendored code may hold "{{" in f-strings).
VENDORED = ("runtime", "loadtests")
# Skips the generated suite may report here, each with the reason it must give.
ALLOWED_SKIPS = {"pytorch": "torch is not installed", "batching-off-streaming": "torch is not installed"}
# Skips every variant may report: the golden-sample tests wait for `make golden`.
ALWAYS_ALLOWED_SKIPS = ["no golden samples"]
# The variants whose suite runs the deploy/k8s tests (marker k8s): the overlays do not depend on the tensors,
# so the defaults and the one with two models and the longest names stand for all.
K8S_VARIANTS = ("defaults", "long-names")
# The k8s tests' tools: a test that needs a missing one skips, and may, naming it ("<tool> not found").
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
K8S_TOOLS = {
    "kubectl": shutil.which("kubectl"),
    "promtool": shutil.which("promtool"),
    "prometheus": shutil.which("prometheus"),
    "checkov": str(CHECKOV) if CHECKOV.exists() else shutil.which("checkov"),
}
# "${{" is GitHub Actions syntax, kept by {% raw %}; "{{ $" is Prometheus' alert templating (PrometheusRule).
JINJA = re.compile(r"(?<!\$)\{\{(?!\s*\$)|\{%|\{#")


@pytest.fixture(scope="module", params=list(VARIANTS))
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated project of one variant (baked once per module)."""
    return bake(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])


def rendered_files(project: Path) -> list[Path]:
    return [
        path
        for path in project.rglob("*")
        if path.is_file() and (path.relative_to(project).parts[0] not in VENDORED or path.name == "locustfile.py")
    ]


def test_every_template_expression_is_rendered(project: Path) -> None:
    leftovers = [
        f"{path.relative_to(project)}: {line.strip()}"
        for path in rendered_files(project)
        for line in path.read_text().splitlines()
        if JINJA.search(line)
    ]
    assert leftovers == []


def test_config_files_parse(project: Path) -> None:
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == project.name
    workflows = list((project / ".github" / "workflows").glob("*.yml"))
    assert workflows
    for workflow in workflows:
        assert "jobs" in yaml.safe_load(workflow.read_text())
    manifests = [*(project / "deploy").rglob("*.yaml"), *(project / "tests" / "k8s").glob("*.yaml")]
    assert len(manifests) >= 10
    for manifest in manifests:
        assert all(document is not None for document in yaml.safe_load_all(manifest.read_text())), manifest
    assert json.loads((project / "deploy" / "k8s" / "base" / "dashboard.json").read_text())["panels"]
    assert json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["project"] == project.name


def test_the_runtime_and_load_tests_are_vendored(project: Path) -> None:
    assert (project / "runtime" / "pyproject.toml").is_file()
    assert (project / "runtime" / "tritonrt" / "triton.py").is_file()
    assert (project / "loadtests" / "__main__.py").is_file()
    assert (project / "loadtests" / "locustfile.py").is_file()
    vendored = [path.relative_to(project) for name in VENDORED for path in (project / name).rglob("*")]
    assert [path for path in vendored if path.parts[1] == "tests" or "__pycache__" in path.parts] == []
    assert [path for path in vendored if path.name.endswith((".egg-info", ".pyc"))] == []
    # The backend's sources, for make install and make runtime-wheel (cargo); never a build of it.
    native = project / "runtime" / "native"
    assert all((native / name).is_file() for name in ("Cargo.toml", "Cargo.lock", "src/lib.rs"))
    assert not (native / "target").exists() and not (native / "tests").exists()
    assert not (project / "runtime" / "tritonrt" / "_native").exists()


def test_only_the_chosen_options_leave_files(project: Path) -> None:
    answers = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    assert (project / "tests" / "test_streaming.py").exists() == (answers["streaming"] == "yes")


def test_what_the_swap_keeps_does_not_describe_the_placeholder(project: Path) -> None:
    # The README's swap deletes placeholder.py, its weights and tests/test_placeholder.py and rewrites the code
    # marked YOUR MODEL. What stays must not present the placeholder as the model, nor name the files that go:
    # model.py's docstring speaks of it only in its paragraph marked YOUR MODEL, test_model.py not at all.
    package = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]["package"]
    docstring = ast.get_docstring(ast.parse((project / "src" / package / "model.py").read_text())) or ""
    paragraphs = docstring.split("\n\n")
    unmarked = [text for text in paragraphs if "placeholder" in text.lower() and not text.startswith("YOUR MODEL")]
    assert unmarked == [] and any(text.startswith("YOUR MODEL") for text in paragraphs), paragraphs
    assert "placeholder" not in (project / "tests" / "test_model.py").read_text().lower()


def test_lint_passes(project: Path) -> None:
    result = subprocess.run(
        ["make", "lint", f"PY={sys.executable}"], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_lint_says_where_an_untyped_library_goes_and_that_fix_works(tmp_path: Path) -> None:
    # A model's library without type information (joblib in the issue; cookiecutter here, installed and untyped)
    # fails mypy with import-untyped: make lint says where to declare it, and declaring it there passes.
    project = bake(tmp_path)
    module = '"""Uses an untyped library."""\n\nimport cookiecutter\n\n__all__ = ["V"]\nV = cookiecutter.__version__\n'
    (project / "src" / "my_service" / "untyped_user.py").write_text(module)
    lint = ["make", "--no-print-directory", "lint", f"PY={sys.executable}"]
    refused = subprocess.run(lint, cwd=project, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "[import-untyped]" in refused.stdout, refused.stdout + refused.stderr
    assert "[[tool.mypy.overrides]]" in refused.stderr and "pyproject.toml" in refused.stderr, refused.stderr
    pyproject = project / "pyproject.toml"
    marked = '# No type information published.\nmodule = ["'
    assert marked in pyproject.read_text()
    pyproject.write_text(pyproject.read_text().replace(marked, marked + 'cookiecutter", "cookiecutter.*", "'))
    fixed = subprocess.run(lint, cwd=project, capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_make_help_lists_every_target(project: Path) -> None:
    result = subprocess.run(["make", "help"], cwd=project, capture_output=True, text=True, timeout=60)
    listed = re.findall(r"make (\S+)", result.stdout)
    expected = ["help", "install", "serve", "test", "golden", "lint", "lock", "format", "image", "run", "wheels",
                "runtime-wheel", "loadtest", "loadtest-ui", "tune", "update"]  # fmt: skip
    expected += ["slo", "k8s", "checkov"]
    assert listed == expected


def test_the_shared_environment_has_every_dependency(project: Path) -> None:
    # The suite runs in this environment: what the project needs must be installed here (requirements-dev.txt).
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    needed = [Requirement(text) for text in pyproject["dependencies"] + pyproject["optional-dependencies"]["dev"]]
    missing = []
    for requirement in needed:
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            missing.append(f"{requirement} (installed: {version})")
    assert missing == []


def test_the_lock_pins_every_dependency_within_the_pyproject(project: Path) -> None:
    # requirements.txt: one pin per package (per Python where they differ), each one the pyproject.toml allows.
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    pins: dict[str, list[str]] = {}
    for line in (project / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            (version,) = (spec.version for spec in requirement.specifier if spec.operator == "==")
            pins.setdefault(canonical(requirement.name), []).append(version)
    needed = [Requirement(text) for extra in pyproject["optional-dependencies"].values() for text in extra]
    needed += [Requirement(text) for text in pyproject["dependencies"]]
    problems = []
    for requirement in needed:
        versions = pins.get(canonical(requirement.name), [])
        if requirement.name != "tritonrt" and not (versions and all(map(requirement.specifier.contains, versions))):
            problems.append(f"{requirement}: {versions}")
    assert problems == []
    # tritonrt is the vendored runtime, pinned to its version (make install installs it from runtime/).
    runtime = tomllib.loads((REPO_ROOT / "runtime" / "pyproject.toml").read_text())["project"]["version"]
    assert f"tritonrt=={runtime}" in pyproject["dependencies"]
    assert "tritonrt" not in pins


@pytest.mark.bake
@pytest.mark.parametrize("framework", ["numpy", "pytorch"])
def test_the_lock_is_what_make_lock_writes(tmp_path: Path, framework: str) -> None:
    # Resolves from PyPI (uv): the template's lock (make lock at the root) must be the generated project's own.
    project = bake(tmp_path, framework=framework)
    before = (project / "requirements.txt").read_text()
    result = subprocess.run(["make", "lock", f"PY={sys.executable}"], cwd=project, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "requirements.txt").read_text() == before, "the template's lock is stale: run make lock"


@pytest.mark.bake
def test_the_generated_suite_passes(project: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
         str(site), str(project), str(project / "runtime")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    report = tmp_path / "report.xml"
    variant = request.node.callspec.params["project"]
    # The container tests belong to the image's own checks (tests/test_container.py); here the unit,
    # integration and, for K8S_VARIANTS, the k8s tests run.
    markers = "not container" if variant in K8S_VARIANTS else "not container and not k8s"
    env = {**os.environ, "PYTHONPATH": str(site), **({"CHECKOV": K8S_TOOLS["checkov"]} if K8S_TOOLS["checkov"] else {})}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--ignore=tests/test_container.py",
         "-m", markers, f"--junitxml={report}", "-q"],
        cwd=project, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert int(suite.get("tests")) >= 15
    skipped = {case.get("name"): case.find("skipped").get("message") for case in suite.iter("testcase")
               if case.find("skipped") is not None}  # fmt: skip
    # Under CI a missing tool fails the generated suite (its tests/conftest.py): no tool skip is allowed there.
    missing = [] if os.environ.get("CI") else [f"{tool} not found" for tool, path in K8S_TOOLS.items() if not path]
    allowed = [ALLOWED_SKIPS.get(variant), *ALWAYS_ALLOWED_SKIPS, *missing]
    assert all(any(reason and reason in message for reason in allowed) for message in skipped.values()), skipped
    k8s = [case for case in suite.iter("testcase") if ".test_k8s_" in "." + case.get("classname", "")]
    assert len(k8s) >= (30 if variant in K8S_VARIANTS else 0) and (k8s == []) == (variant not in K8S_VARIANTS)
    integration = [case for case in suite.iter("testcase") if case.get("classname", "").endswith("test_service")]
    assert integration and not any(case.find("skipped") is not None for case in integration)


# --- answers a person types, hostile ones included ------------------------------------------------


def test_typed_free_text_renders_as_typed_and_never_runs(tmp_path: Path) -> None:
    name = 'Svc {{ 7*7 }} "q" \\x <b>'
    description = "Desc {% raw %} {{ cookiecutter.author }} *x* \"\"\" ''' `code`"
    author = "O'Brien {# not a comment #}"
    result = bake_interactively(tmp_path, {"project_name": name, "description": description, "author": author})
    assert result.returncode == 0, result.stderr
    (project,) = tmp_path.iterdir()
    assert project.name == "svc-7-7-q-x-b"
    readme = (project / "README.md").read_text()
    assert readme.startswith(f"# {markdown(name)}\n\n{markdown(description)}\n")
    assert f"Author: {markdown(author)}." in readme
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert (meta["description"], meta["authors"]) == (description, [{"name": author}])
    recorded = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    assert (recorded["project_name"], recorded["description"], recorded["author"]) == (name, description, author)
    assert "49" not in readme
    lint = subprocess.run(["make", "lint", f"PY={sys.executable}"], cwd=project, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_quotes_newlines_and_control_characters_render_safely(tmp_path: Path) -> None:
    description = 'first line\nsecond\tline "quoted" \\ back \x7f\x00 end\r\n'
    author = 'Ann\n"Annie" O\'Hara\\'
    project = bake(tmp_path, description=description, author=author)
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert (meta["description"], meta["authors"]) == (one_line(description), [{"name": one_line(author)}])
    readme = (project / "README.md").read_text().splitlines()
    assert readme[2] == markdown(description)


def test_the_derived_names_follow_the_project_name(tmp_path: Path) -> None:
    project = bake(tmp_path, project_name="Fraud Detector v2")
    answers = json.loads((project / ".cookiecutter.json").read_text())["cookiecutter"]
    assert (project.name, answers["package"], answers["model_name"]) == (
        "fraud-detector-v2",
        "fraud_detector_v2",
        "fraud_detector_v2",
    )
    assert (project / "src" / "fraud_detector_v2" / "service.py").is_file()


def test_bad_answers_stop_generation_and_leave_nothing(tmp_path: Path) -> None:
    with pytest.raises(FailedHookException):
        bake(tmp_path, inputs="x:float:-1", max_batch_size="lots")
    assert list(tmp_path.iterdir()) == []


def test_bad_typed_answers_are_explained(tmp_path: Path) -> None:
    result = bake_interactively(tmp_path, {"package": "json", "outputs": "y:float32:0", "triton_image": "x; id"})
    assert result.returncode != 0
    assert "3 answer(s) need fixing" in result.stderr
    for field in ("package: 'json'", "outputs: 'y:float32:0'", "triton_image: 'x; id'"):
        assert field in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_rebaking_from_the_recorded_answers_gives_the_same_project(tmp_path: Path) -> None:
    first = bake(tmp_path / "first", **VARIANTS["several-tensors"], streaming="yes", description='"x"\ny')
    replay = first / ".cookiecutter.json"
    again = Path(cookiecutter(str(REPO_ROOT), replay=str(replay), output_dir=str(tmp_path / "again")))
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    assert files == sorted(path.relative_to(again) for path in again.rglob("*") if path.is_file())
    assert [path for path in files if (first / path).read_bytes() != (again / path).read_bytes()] == []
