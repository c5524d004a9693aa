"""A PyTriton 0.7 program exercising decorators on requests built by hand; prints what it observed as JSON.

Usage: decorators.py
"""

import json

import numpy as np
from pytriton.decorators import batch, first_value, group_by_values
from pytriton.proxy.types import Request

observed = {}


def _groups(key_rows, dtype, key_shape_tail=(1,)):
    """The key values of each call @group_by_values makes, in call order, and the reassembled outputs."""
    calls = []

    @batch
    @group_by_values("key")
    def _infer(key, x):
        calls.append([item.decode() if isinstance(item, bytes) else item for item in key.ravel().tolist()])
        return {"y": x * 10}

    keys = np.array(key_rows, dtype=dtype).reshape((len(key_rows), *key_shape_tail))
    x = np.arange(len(key_rows), dtype=np.float32).reshape(-1, 1)
    responses = _infer([Request(data={"key": keys, "x": x})])
    return {"calls": calls, "y": responses[0]["y"].ravel().tolist()}


observed["group_int64"] = _groups([3, 1, 2, 1, 3], np.int64)
observed["group_int32_negative"] = _groups([-1, 2, -3], np.int32)
observed["group_float32"] = _groups([0.5, -1.0, 2.0, 1.0], np.float32)
observed["group_bytes"] = _groups([b"b", b"a", b"ab", b"a"], object)
observed["group_one_axis"] = _groups([3, -1, 2, -1], np.int64, key_shape_tail=())


@batch
def _uneven(x):
    return {"y": x[:1], "z": x}


try:
    _uneven([Request(data={"x": np.zeros((2, 1), np.float32)}), Request(data={"x": np.zeros((1, 1), np.float32)})])
    observed["batch_error"] = None
except Exception as error:  # noqa: BLE001 - the type is what is observed
    observed["batch_error"] = {"type": type(error).__name__, "is_value_error": isinstance(error, ValueError)}

try:
    first_value("__triton_context__")
    observed["first_value_context_key"] = None
except Exception as error:  # noqa: BLE001
    observed["first_value_context_key"] = type(error).__name__

print("OBSERVED " + json.dumps(observed), flush=True)
