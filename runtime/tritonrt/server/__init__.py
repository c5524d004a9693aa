"""Find or install tritonserver, build its command line, start, watch and stop it."""

__all__: list[str] = []
