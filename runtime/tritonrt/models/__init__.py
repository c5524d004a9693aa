"""Bound models and the Triton model repository written from them."""

__all__: list[str] = []
