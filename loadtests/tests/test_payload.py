"""Payloads: seeded random inputs from a spec, and user samples from .npz/.npy files."""

from __future__ import annotations

import numpy as np
import pytest

from loadtests.errors import LoadTestSetupError
from loadtests.model_spec import ModelSpec, TensorSpec
from loadtests.payload import load_samples, random_inputs

ALL_TYPES = ModelSpec(
    name="m",
    inputs=tuple(
        TensorSpec(dt.lower(), dt, (-1, 3))
        for dt in (
            "BOOL",
            "UINT8",
            "INT8",
            "INT32",
            "INT64",
            "UINT64",
            "FP16",
            "FP32",
            "FP64",
            "BF16",
            "BYTES",
        )
    ),
    outputs=(TensorSpec("y", "FP32", (-1,)),),
    max_batch_size=8,
)
UNBATCHED = ModelSpec(name="u", inputs=(TensorSpec("x", "FP32", (2, -1)),), outputs=(), max_batch_size=0)
IMAGE = ModelSpec(
    name="img",
    inputs=(TensorSpec("image", "UINT8", (3, 4, 4)), TensorSpec("prompt", "BYTES", (1,), optional=True)),
    outputs=(),
    max_batch_size=4,
)


def test_random_inputs_have_each_dtype_and_shape():
    payload = random_inputs(ALL_TYPES, batch_size=2, seed=0, dynamic_dim=5)

    assert list(payload) == [t.name for t in ALL_TYPES.inputs]
    for tensor in ALL_TYPES.inputs:
        array = payload[tensor.name]
        assert array.shape == (2, 5, 3), tensor.name
        assert array.dtype == tensor.numpy_dtype, tensor.name
    assert all(isinstance(v, bytes) and len(v) == 8 for v in payload["bytes"].flat)


def test_random_inputs_are_seeded():
    first = random_inputs(ALL_TYPES, 1, seed=7, dynamic_dim=4)
    again = random_inputs(ALL_TYPES, 1, seed=7, dynamic_dim=4)
    other = random_inputs(ALL_TYPES, 1, seed=8, dynamic_dim=4)

    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["fp32"], other["fp32"])


def test_unbatched_model_has_no_batch_axis():
    assert random_inputs(UNBATCHED, batch_size=1, seed=0, dynamic_dim=4)["x"].shape == (2, 4)


@pytest.mark.parametrize("batch_size", [0, 9])
def test_batch_size_must_fit_the_model(batch_size):
    with pytest.raises(LoadTestSetupError, match="max_batch_size 8"):
        random_inputs(ALL_TYPES, batch_size=batch_size, seed=0, dynamic_dim=4)


def test_npz_and_npy_samples(tmp_path):
    image = np.zeros((2, 3, 4, 4), dtype=np.uint8)
    np.savez(tmp_path / "a.npz", image=image, prompt=np.array([[b"hi"], [b"yo"]]))
    np.save(tmp_path / "image.npy", np.ones((3, 4, 4), dtype=np.uint8))  # no batch axis: one is added

    first, second = load_samples(tmp_path, IMAGE)

    assert first["image"].shape == (2, 3, 4, 4)
    assert first["prompt"].dtype == object and first["prompt"][1, 0] == b"yo"
    assert set(second) == {"image"} and second["image"].shape == (1, 3, 4, 4)


def test_text_samples_become_bytes(tmp_path):
    np.savez(tmp_path / "a.npz", image=np.zeros((1, 3, 4, 4), np.uint8), prompt=np.array([["héllo"]]))

    [sample] = load_samples(tmp_path, IMAGE)

    assert sample["prompt"][0, 0] == "héllo".encode()


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (
            {"image": np.zeros((1, 3, 4, 4), np.uint8), "extra": np.zeros(1)},
            "extra is not an input of model 'img'",
        ),
        ({"prompt": np.array([[b"x"]])}, r"required input\(s\) image missing"),
        (
            {"image": np.zeros((1, 3, 4, 4), np.float32)},
            r"is float32, the model takes UINT8.*astype\(np.uint8\)",
        ),
        (
            {"image": np.zeros((1, 3, 5, 4), np.uint8)},
            r"has shape \[1, 3, 5, 4\], the model takes \[-1, 3, 4, 4\]",
        ),
        ({"image": np.zeros((5, 3, 4, 4), np.uint8)}, "batch of 5, more than the model's max_batch_size 4"),
        ({"image": np.zeros((1, 3, 4, 4), np.uint8), "prompt": np.zeros((1, 1))}, "the model takes BYTES"),
    ],
    ids=["unknown-input", "missing-input", "dtype", "shape", "batch", "bytes"],
)
def test_bad_samples_are_explained(tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)

    with pytest.raises(LoadTestSetupError, match=message) as caught:
        load_samples(tmp_path, IMAGE)
    assert "bad.npz" in str(caught.value)


def test_object_arrays_need_fixed_width_bytes(tmp_path):
    np.save(tmp_path / "prompt.npy", np.array([b"a", b"bc"], dtype=object), allow_pickle=True)

    with pytest.raises(LoadTestSetupError, match="fixed-width arrays"):
        load_samples(tmp_path, IMAGE)


def test_samples_folder_must_exist_and_hold_samples(tmp_path):
    with pytest.raises(LoadTestSetupError, match="does not exist"):
        load_samples(tmp_path / "missing", IMAGE)
    with pytest.raises(LoadTestSetupError, match="holds no .npz or .npy files"):
        load_samples(tmp_path, IMAGE)


def test_one_npz_file_of_a_batch_gives_one_request_per_sample(tmp_path):
    images = np.arange(6 * 48, dtype=np.uint8).reshape(6, 3, 4, 4)  # 6 samples: more than max_batch_size
    np.savez(tmp_path / "digits.npz", image=images)

    requests = load_samples(tmp_path / "digits.npz", IMAGE)

    assert len(requests) == 6
    for row, request in enumerate(requests):
        np.testing.assert_array_equal(request["image"], images[row : row + 1])


def test_one_npz_file_of_one_sample_is_one_request(tmp_path):
    np.savez(tmp_path / "one.npz", x=np.ones((2, 5), dtype=np.float32))

    [request] = load_samples(tmp_path / "one.npz", UNBATCHED)

    assert request["x"].shape == (2, 5)
