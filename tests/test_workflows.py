"""The GitHub workflows, the template's own and a generated project's, and the generated project's dependabot and
pre-commit configurations: each passes zizmor's audit and its JSON schema, offline, and pre-commit's hooks pass.

zizmor runs ``--offline`` and check-jsonschema uses the schemas it carries (``--builtin-schema``): neither needs
the network. Both come with ``make venv`` (requirements-dev.txt).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, bake

BIN = Path(sys.executable).parent
# uses: owner/repo[/path]@<40 hex digits>  # v1.2.3
PINNED = re.compile(r"^\s*-?\s*uses:\s*[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+# v\d+(\.\d+)*\s*$")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("workflows"), streaming="yes")


def workflow_dirs(project: Path) -> list[Path]:
    return [REPO_ROOT / ".github", project / ".github"]


def run(command: list[str], cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    # No token: zizmor's online audits stay off even where GH_TOKEN is set (--offline too).
    tokens = ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")
    env = {key: value for key, value in os.environ.items() if key not in tokens} | extra_env
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_zizmor_finds_nothing(project: Path) -> None:
    for directory in workflow_dirs(project):
        result = run([str(BIN / "zizmor"), "--offline", "--no-progress", str(directory)], cwd=directory)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "No findings to report" in result.stdout + result.stderr


def test_workflows_and_dependabot_match_their_schemas(project: Path) -> None:
    workflows = [path for directory in workflow_dirs(project) for path in (directory / "workflows").glob("*.yml")]
    assert {path.name for path in workflows} == {"test.yml", "ci.yml", "release.yml"}
    checks = [("vendor.github-workflows", workflows), ("vendor.dependabot", [project / ".github" / "dependabot.yml"])]
    for schema, files in checks:
        command = [str(BIN / "check-jsonschema"), "--builtin-schema", schema, *map(str, files)]
        result = run(command, cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr


def test_dependabot_watches_only_what_it_can_update(project: Path) -> None:
    # Dependabot's docker updates read image names in FROM lines: a Dockerfile whose FROM lines all take a
    # variable (FROM ${BASE_IMAGE}) gives it nothing to update, so an entry for it would promise updates that
    # never come.
    config = yaml.safe_load((project / ".github" / "dependabot.yml").read_text())
    for update in config["updates"]:
        if update["package-ecosystem"] == "docker":
            dockerfile = project / update["directory"].strip("/") / "Dockerfile"
            froms = re.findall(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", dockerfile.read_text(),
                               re.MULTILINE | re.IGNORECASE)  # fmt: skip
            stages = {stage for _, stage in froms if stage}
            named = [image for image, _ in froms if "$" not in image and image not in stages]
            assert named, f"{dockerfile}: no FROM line names an image ({[image for image, _ in froms]})"
    ecosystems = {update["package-ecosystem"] for update in config["updates"]}
    assert ecosystems == {"pip", "github-actions"}, ecosystems


def test_actions_are_pinned_by_commit_with_least_permissions(project: Path) -> None:
    for directory in workflow_dirs(project):
        for path in (directory / "workflows").glob("*.yml"):
            text = path.read_text()
            uses = [line for line in text.splitlines() if "uses:" in line]
            assert uses and all(PINNED.match(line) for line in uses), (path, uses)
            workflow = yaml.safe_load(text)
            assert workflow["permissions"] == {}, path  # nothing by default; each job names what it needs
            for name, job in workflow["jobs"].items():
                assert "permissions" in job and "write-all" not in str(job["permissions"]), (path, name)
                checkouts = [step for step in job["steps"] if "actions/checkout@" in step.get("uses", "")]
                assert all(step["with"]["persist-credentials"] is False for step in checkouts), (path, name)


def test_the_release_pushes_to_the_one_registry_it_names(project: Path) -> None:
    release = yaml.safe_load((project / ".github" / "workflows" / "release.yml").read_text())
    assert release[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key "on" as True
    assert release["env"]["REGISTRY"] == "ghcr.io"
    (job,) = release["jobs"].values()
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    steps = yaml.safe_dump(job["steps"])
    assert "make runtime-wheel" in steps and "make image" in steps and 'docker push "$image"' in steps
    assert steps.count("REGISTRY") == 2  # the login and the image name read env.REGISTRY: set once above


def test_pre_commit_hooks_pass_on_a_fresh_project(project: Path, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: pre-commit works on a git repository")
    copy = tmp_path / project.name
    shutil.copytree(project, copy)
    (copy / ".venv").symlink_to(Path(sys.prefix))  # the hooks run the tools of the project's .venv
    assert run(["git", "init", "-q"], cwd=copy).returncode == 0
    assert run(["git", "add", "-A"], cwd=copy).returncode == 0
    cache = str(tmp_path / "pre-commit-cache")
    result = run([str(BIN / "pre-commit"), "run", "--all-files"], cwd=copy, PRE_COMMIT_HOME=cache)
    assert result.returncode == 0, result.stdout + result.stderr
    for hook in ("trim trailing whitespace", "end files with one newline", "check YAML", "ruff check", "ruff format",
                 "mypy"):  # fmt: skip
        assert re.search(rf"^{re.escape(hook)}\.+Passed$", result.stdout, re.MULTILINE), result.stdout
