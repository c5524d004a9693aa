"""The worker side of tritonrt's native backend: the threads that serve the inference callables, and their
connection to the model's instances inside tritonserver."""

__all__: list[str] = []
