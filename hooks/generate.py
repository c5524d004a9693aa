"""Finish a generated project (run by ``post_gen_project.py`` in the new project's directory).

One function per step: copy the template's ``runtime/`` (tritonrt) and ``loadtests/`` (the Locust
library) into the project, remove the files of options not chosen, record the answers, print the next
steps. No step needs the network.

Example::

    main(context, template_root=pathlib.Path("/path/to/template"), project_dir=pathlib.Path.cwd())
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Never vendored, at any depth: caches and build output of the template's own checkouts.
SKIP_ANYWHERE = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".venv", "build", "dist"})
SKIP_SUFFIXES = (".egg-info", ".pyc")
# Left out of the vendored runtime: the template's tests (the runtime's and the backend crate's; `cargo build`
# needs neither), cargo's build output and the backend library a wheel build places in the package.
RUNTIME_SKIPPED = ("tests", "native/tests", "native/abi", "native/target", "tritonrt/_native")
# Files that only make sense for some answers: path in the project -> is it wanted?
OPTIONAL_FILES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "tests/test_streaming.py": lambda answers: answers["streaming"] == "yes",
}
# Context keys that describe the machine that generated the project or the template's state, not the answers
# (the template commit changes at each update; cruft keeps it in .cruft.json).
UNRECORDED_KEYS = frozenset({"_output_dir", "_repo_dir", "_checkout", "_commit"})
ANSWERS_FILE = ".cookiecutter.json"


def vendor(source: pathlib.Path, destination: pathlib.Path, skip: Iterable[str] = ()) -> list[pathlib.Path]:
    """Copy the tree ``source`` into ``destination`` and return the files copied (relative paths).

    Files already in ``destination`` (the template's own, e.g. ``loadtests/locustfile.py``) are kept.
    ``skip`` names paths relative to ``source`` to leave out, with everything under them (e.g. ``tests``,
    ``native/target``).

    Example::

        vendor(template / "runtime", project / "runtime", skip=RUNTIME_SKIPPED)
    """
    if not source.is_dir():
        raise FileNotFoundError(
            f"The template has no {source.name}/ directory at {source}; generate from a complete checkout "
            "of the template repository."
        )
    skipped = [pathlib.PurePosixPath(path).parts for path in skip]
    copied = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if _is_skipped(relative, skipped) or not path.is_file():
            continue
        target = destination / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(relative)
    return copied


def _is_skipped(relative: pathlib.Path, skipped: list[tuple[str, ...]]) -> bool:
    if any(relative.parts[: len(parts)] == parts for parts in skipped):
        return True
    return any(part in SKIP_ANYWHERE or part.endswith(SKIP_SUFFIXES) for part in relative.parts)


def remove_unused(project_dir: pathlib.Path, answers: Mapping[str, Any]) -> list[str]:
    """Delete the files of options not chosen; return their paths.

    Example::

        remove_unused(project, {"streaming": "no"})  # ["tests/test_streaming.py"]
    """
    removed = []
    for relative, wanted in OPTIONAL_FILES.items():
        path = project_dir / relative
        if not wanted(answers) and path.exists():
            path.unlink()
            removed.append(relative)
    return removed


def record_answers(project_dir: pathlib.Path, context: Mapping[str, Any]) -> pathlib.Path:
    """Write the answers to ``.cookiecutter.json`` in cookiecutter's replay format.

    Re-bake (e.g. after a template update) with the same answers::

        cookiecutter --replay-file my-service/.cookiecutter.json <template> --overwrite-if-exists
    """
    answers = {key: value for key, value in context.items() if key not in UNRECORDED_KEYS}
    path = project_dir / ANSWERS_FILE
    path.write_text(json.dumps({"cookiecutter": answers}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def next_steps(project_dir: pathlib.Path, answers: Mapping[str, Any]) -> str:
    """The text printed after generation: how to get from here to a served request."""
    package = answers["package"]
    commands = [
        ("make install", ".venv with the tritonrt runtime (its backend built with cargo) and the service"),
        ("make serve", f"python -m {package}: HTTP :8000, gRPC :8001, metrics :8002"),
        (f".venv/bin/python -m {package}.client", "in another terminal: send an example request"),
        ("make test", "unit and integration tests"),
        ("make help", "everything else: lint, image, run, wheels, loadtest"),
    ]
    width = max(len(command) for command, _ in commands)
    lines = [f"Created {answers['project']} in {project_dir}", "", "Next steps:", f"  cd {project_dir}"]
    lines += [f"  {command.ljust(width)}  # {comment}" for command, comment in commands]
    return "\n".join(lines)


def main(context: Mapping[str, Any], template_root: pathlib.Path, project_dir: pathlib.Path) -> int:
    """Run every step; return the hook's exit status."""
    try:
        vendor(template_root / "runtime", project_dir / "runtime", skip=RUNTIME_SKIPPED)
        vendor(template_root / "loadtests", project_dir / "loadtests", skip=("tests",))
    except OSError as error:
        print(f"Cannot finish the project: {error}", file=sys.stderr)
        return 1
    remove_unused(project_dir, context)
    record_answers(project_dir, context)
    print(next_steps(project_dir, context))
    return 0
