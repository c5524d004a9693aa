"""The template's hooks, as importable modules with small functions (unit-tested in tests/test_hooks.py).

- ``tensor_spec``: parse the ``inputs`` / ``outputs`` answers (``name:dtype:shape,...``), once, for both
  validation and rendering.
- ``answers``: validate every answer before the project is written (run by ``pre_gen_project.py``).
- ``render``: the Jinja extension the template renders with (tensor specs, safe TOML and Markdown text).
- ``generate``: vendor the runtime and load tests, prune unused files, record the answers, print the
  next steps (run by ``post_gen_project.py``).
"""
