"""TritonLifecyclePolicy: when a Triton starts its server, and where its models' files go (PyTriton 0.7).

Example::

    # Start the server only at run()/serve(), so that the models bound before load during its start-up
    # (the server reports ready once they are):
    with Triton(triton_lifecycle_policy=TritonLifecyclePolicy(launch_triton_on_startup=False)) as triton:
        triton.bind(...)
        triton.serve()
"""

from __future__ import annotations

import dataclasses

__all__ = ["DefaultTritonLifecyclePolicy", "TritonLifecyclePolicy", "VertextAILifecyclePolicy", "choose_policy"]


@dataclasses.dataclass
class TritonLifecyclePolicy:
    """When the server starts and where the model store is.

    ``launch_triton_on_startup``: start the server when the ``with`` block is entered (True, the default) or
    only at ``run()``/``serve()``. ``local_model_store``: PyTriton's switch between writing the models into
    the server's repository folder (True) and uploading them through the repository API (False). A local
    ``Triton`` of tritonrt always writes them into its repository folder, which serves the same models
    either way; a ``RemoteTriton`` uploads them.
    """

    launch_triton_on_startup: bool = True
    local_model_store: bool = False


DefaultTritonLifecyclePolicy = TritonLifecyclePolicy()
"""The policy a Triton uses unless told otherwise: start on entering ``with``."""
VertextAILifecyclePolicy = TritonLifecyclePolicy(launch_triton_on_startup=False, local_model_store=True)
"""The policy a Triton uses with ``TritonConfig(allow_vertex_ai=True)`` (PyTriton's spelling kept)."""


def choose_policy(policy: TritonLifecyclePolicy | None, vertex_ai: bool) -> TritonLifecyclePolicy:
    """The policy given, else Vertex AI's when the config allows Vertex AI, else the default (PyTriton 0.7)."""
    if policy is not None:
        return policy
    return VertextAILifecyclePolicy if vertex_ai else DefaultTritonLifecyclePolicy
