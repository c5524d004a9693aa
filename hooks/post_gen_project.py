"""Cookiecutter post-generation hook: vendor the runtime and load tests, prune, record, print next steps.

Cookiecutter renders this file with Jinja and runs it in the new project's directory. The steps live
in ``hooks/generate.py`` (importable, unit-tested); the answers reach it as JSON, never as code.
"""

import json
import pathlib
import sys

TEMPLATE_ROOT = {{ template_root | tojson }}
sys.path.insert(0, TEMPLATE_ROOT)

from hooks.generate import main  # noqa: E402

context = json.loads({{ cookiecutter | tojson | tojson }})
sys.exit(main(context, template_root=pathlib.Path(TEMPLATE_ROOT), project_dir=pathlib.Path.cwd()))
