"""``python -m {{ cookiecutter.package }}``: serve the model (see ``service.py``)."""

from {{ cookiecutter.package }}.service import main

if __name__ == "__main__":
    raise SystemExit(main())
