"""The project's build tools, each a small program the Makefile runs (``python -m tools.<name>``)."""
