"""tritonrt: serve Python inference callables with NVIDIA Triton Inference Server.

A PyTriton 0.7 compatible API::

    import numpy as np
    from tritonrt.decorators import batch
    from tritonrt.model_config import ModelConfig, Tensor
    from tritonrt.triton import Triton

    @batch
    def infer(x):
        return {"y": x * 2}

    with Triton() as triton:
        triton.bind("double", infer, inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=64))
        triton.serve()
"""

__version__ = "0.7.0.1"
"""``<PyTriton API level>.<tritonrt revision>``: the first three numbers name the PyTriton release whose API
tritonrt follows (0.7.0), the fourth counts tritonrt's releases at that level. Version checks written for
PyTriton (``Version(__version__) >= Version("0.5")``) therefore test the API level, as they did there."""
