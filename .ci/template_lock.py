"""Write the generated project's lock, ``{{cookiecutter.project}}/requirements.txt``, with ``make lock``'s own output.

The lock depends on one answer, the framework (pytorch adds the ``torch`` extra): this bakes the template once per
framework, runs ``make lock`` in each project (uv, from PyPI) and joins the two outputs into one Jinja template,
each line that only one framework has wrapped in that framework's condition. A baked project's lock is then
exactly what its own ``make lock`` writes (tests/test_bake.py checks it). Run by ``make lock`` at the root.

Example::

    python .ci/template_lock.py --python .venv/bin/python
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter  # type: ignore[import-untyped]

__all__ = ["LOCK", "TEMPLATE_LOCK", "join", "lock_of", "main"]

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK = "requirements.txt"
TEMPLATE_LOCK = REPO_ROOT / "{{cookiecutter.project}}" / LOCK
FRAMEWORKS = ("numpy", "pytorch")


def lock_of(framework: str, python: str, work: Path) -> list[str]:
    """The lines ``make lock`` writes in a project baked with ``framework``, starting from the template's lock."""
    baked = cookiecutter(str(REPO_ROOT), no_input=True, extra_context={"framework": framework},
                         output_dir=str(work / framework))  # fmt: skip
    project = Path(baked)
    print(f"==> make lock in a {framework} project", flush=True)
    subprocess.run(["make", "--no-print-directory", "lock", f"PY={python}"], cwd=project, check=True)
    return (project / LOCK).read_text().splitlines(keepends=True)


def join(plain: list[str], torch: list[str]) -> str:
    """One Jinja template of both locks: lines of one framework's lock alone go under its condition."""
    out: list[str] = []
    for tag, a_start, a_end, b_start, b_end in difflib.SequenceMatcher(
        None, plain, torch, autojunk=False
    ).get_opcodes():
        if tag == "equal":
            out += plain[a_start:a_end]
            continue
        if a_end > a_start:
            out += ['{%- if cookiecutter.framework != "pytorch" %}\n', *plain[a_start:a_end], "{%- endif %}\n"]
        if b_end > b_start:
            out += ['{%- if cookiecutter.framework == "pytorch" %}\n', *torch[b_start:b_end], "{%- endif %}\n"]
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the Python whose environment has uv (make venv's)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="template-lock-") as work:
        plain, torch = (lock_of(framework, args.python, Path(work)) for framework in FRAMEWORKS)
    TEMPLATE_LOCK.write_text(join(plain, torch))
    print(f"{TEMPLATE_LOCK.relative_to(REPO_ROOT)}: {sum(1 for line in torch if '==' in line)} pins (pytorch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
