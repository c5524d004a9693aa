"""Cookiecutter pre-generation hook: reject bad answers before the project is written.

Cookiecutter renders this file with Jinja and runs it in the new project's directory. The checks live
in ``hooks/answers.py`` (importable, unit-tested); the answers reach it as JSON, never as code.
"""

import json
import sys

sys.path.insert(0, {{ template_root | tojson }})

from hooks.answers import main  # noqa: E402

sys.exit(main(json.loads({{ cookiecutter | tojson | tojson }})))
