"""The proxy model (inside Triton's Python stub) and its transport to the user's process."""

__all__: list[str] = []
