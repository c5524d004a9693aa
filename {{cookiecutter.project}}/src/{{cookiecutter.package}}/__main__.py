"""``python -m {{ cookiecutter.package }}``: serve the model (see ``service.py``).

Each instance's thread budget (``threads.py``) is set first, before the service's imports: numpy, torch or
scikit-learn read it once, when they load.
"""

from {{ cookiecutter.package }} import threads

threads.limit()

from {{ cookiecutter.package }}.service import main  # noqa: E402  (after the thread budget)

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
