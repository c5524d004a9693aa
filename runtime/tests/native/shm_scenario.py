"""Run inside a private mount namespace whose /dev/shm is a tiny, full tmpfs (see test_backend_faults.py): serve
peer.py's models through tritonserver and send a 4 MiB tensor each way. Prints a JSON verdict."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from native_testlib import Stack  # noqa: E402


def main() -> None:
    free = os.statvfs("/dev/shm")
    verdict = {"shm_free_bytes": free.f_bavail * free.f_frsize}
    with tempfile.TemporaryDirectory(prefix="tritonrt-shm-") as root, Stack(pathlib.Path(root)) as stack:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{stack.http}")
        x = np.random.default_rng(0).random((1, 1 << 20)).astype(np.float32)
        tensor = httpclient.InferInput("IN_FP32", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer("identity", [tensor])
        verdict["equal"] = bool(np.array_equal(result.as_numpy("OUT_FP32"), x))
        verdict["shm_entries"] = sorted(os.listdir("/dev/shm"))
    print(json.dumps(verdict), flush=True)


if __name__ == "__main__":
    main()
