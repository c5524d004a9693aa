"""Template updates with cruft: a project generated from one commit of the template takes a later commit.

Each test copies this checkout (its tracked and untracked, not ignored, files: what a commit would hold)
into a temporary git repository, commit A; generates a project from it, commits it as its user would, and
edits it; then changes the template in a new commit B and runs the project's ``make update``. cruft
re-renders the project at A and at B and applies the difference to the project, so the template's
change arrives and the user's edits stay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

GIT_USER = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
# The template change of commit B: a heading of the generated README, a line of the vendored runtime, a new file.
README = "{{cookiecutter.project}}/README.md"
OLD_HEADING, NEW_HEADING = "## Settings\n", "## Settings, from the template's commit B\n"
RUNTIME_LINE = "# a change of the runtime in the template's commit B\n"
NEW_FILE = "{{cookiecutter.project}}/docs/UPDATED.md"
# The user's edits: one line of the model, a line at the end of the README, a file of their own.
MODEL = "src/my_service/model.py"
OLD_SCALE = "self.scale = placeholder.load_scale(weights)"
NEW_SCALE = "self.scale = 2.5 * placeholder.load_scale(weights)"
USER_LINE = "\nNotes of the service's owners.\n"


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", *GIT_USER, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def template_repo(tmp_path: Path) -> tuple[Path, str]:
    """This checkout's files in a new git repository with one commit; returns (repository, commit)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout  # fmt: skip
    repo = tmp_path / "template"
    for relative in filter(None, listed.decode().split("\0")):
        source = REPO_ROOT / relative
        if source.is_file():  # a file deleted in the work tree is still listed
            (repo / relative).parent.mkdir(parents=True, exist_ok=True)
            (repo / relative).write_bytes(source.read_bytes())
            (repo / relative).chmod(source.stat().st_mode)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "A")
    return repo, git(repo, "rev-parse", "HEAD")


def change_template(repo: Path) -> str:
    """Commit B: the README heading, a runtime line, a new file. Returns its commit."""
    readme = repo / README
    assert OLD_HEADING in readme.read_text()
    readme.write_text(readme.read_text().replace(OLD_HEADING, NEW_HEADING))
    with (repo / "runtime" / "tritonrt" / "__init__.py").open("a") as init:
        init.write(RUNTIME_LINE)
    (repo / NEW_FILE).parent.mkdir(parents=True)
    (repo / NEW_FILE).write_text("A file the template added in commit B.\n")
    git(repo, "commit", "-q", "-a", "-m", "B")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "B: a new file")
    return git(repo, "rev-parse", "HEAD")


def commit_project_with_user_edits(project: Path) -> None:
    """The project in git as generated, then the user's own commit on top."""
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "generated")
    model = project / MODEL
    assert OLD_SCALE in model.read_text()
    model.write_text(model.read_text().replace(OLD_SCALE, NEW_SCALE))
    with (project / "README.md").open("a") as readme:
        readme.write(USER_LINE)
    (project / "src" / "my_service" / "weights.py").write_text('"""The owners\' own module."""\n')
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "our model")


def make_update(project: Path, *variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "update", f"PY={sys.executable}", *variables], cwd=project,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def assert_updated_with_the_users_edits(project: Path, commit: str) -> None:
    readme = (project / "README.md").read_text()
    assert NEW_HEADING in readme and OLD_HEADING not in readme
    assert readme.endswith(USER_LINE)
    assert NEW_SCALE in (project / MODEL).read_text()
    assert (project / "src" / "my_service" / "weights.py").is_file()
    assert (project / "runtime" / "tritonrt" / "__init__.py").read_text().endswith(RUNTIME_LINE)
    assert (project / "docs" / "UPDATED.md").is_file()
    assert json.loads((project / ".cruft.json").read_text())["commit"] == commit
    assert list(project.rglob("*.rej")) == []
    # Left for the user to review and commit: the template's changes are not committed for them.
    changed = git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert any(line.endswith("README.md") for line in changed) and any("UPDATED.md" in line for line in changed)
    assert not any(MODEL in line for line in changed)


def test_make_update_brings_the_templates_change_and_keeps_the_users_edits(tmp_path: Path) -> None:
    template, _ = template_repo(tmp_path)
    create = subprocess.run(
        [sys.executable, "-m", "cruft", "create", str(template), "--no-input", "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert create.returncode == 0, create.stdout + create.stderr
    project = tmp_path / "out" / "my-service"
    commit_project_with_user_edits(project)
    commit_b = change_template(template)

    result = make_update(project)

    assert result.returncode == 0, result.stdout + result.stderr
    assert_updated_with_the_users_edits(project, commit_b)


def test_a_project_made_with_cookiecutter_is_linked_then_updated(tmp_path: Path) -> None:
    from cookiecutter.main import cookiecutter

    template, commit_a = template_repo(tmp_path)
    project = Path(cookiecutter(str(template), no_input=True, output_dir=str(tmp_path / "out")))
    commit_project_with_user_edits(project)
    commit_b = change_template(template)

    unlinked = make_update(project)
    assert unlinked.returncode != 0
    assert "no .cruft.json" in unlinked.stderr and "make update TEMPLATE=" in unlinked.stderr

    result = make_update(project, f"TEMPLATE={template}", f"TEMPLATE_COMMIT={commit_a}")

    assert result.returncode == 0, result.stdout + result.stderr
    assert_updated_with_the_users_edits(project, commit_b)
    assert json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]["project"] == "my-service"


def test_cruft_check_tells_when_the_template_has_moved_on(tmp_path: Path) -> None:
    template, _ = template_repo(tmp_path)
    create = subprocess.run(
        [sys.executable, "-m", "cruft", "create", str(template), "--no-input", "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr
    project = tmp_path / "out" / "my-service"
    commit_project_with_user_edits(project)
    check = subprocess.run([sys.executable, "-m", "cruft", "check"], cwd=project, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    change_template(template)
    check = subprocess.run([sys.executable, "-m", "cruft", "check"], cwd=project, capture_output=True, text=True)
    assert check.returncode != 0, "cruft check should report the template's new commit"
