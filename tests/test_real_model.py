"""The swap a data scientist makes: a baked project gets a real model, and its own gates stay green.

The placeholder goes (``placeholder.py``, its weights file and ``tests/test_placeholder.py``, as the
generated README says), a small numpy MLP comes in with its weights in ``weights/mlp.npz``, and with no
other edit the project's ``make golden``, ``make test`` (unit and integration tests against a real
tritonserver, the golden samples included) and ``make lint`` pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest
from conftest import bake

__all__: list[str] = []

# The service the data scientist baked for scikit-learn's digits: 8x8 images in, 10 classes out.
ANSWERS = {"inputs": "image:float32:64", "outputs": "probs:float32:10,label:int64:1"}
HIDDEN = 32

MLP_MODEL = '''
    """The model: a two-layer perceptron over 8x8 images, its weights in weights/mlp.npz."""

    from __future__ import annotations

    import logging

    import numpy as np
    from tritonrt.decorators import batch

    from my_service.model_files import model_file

    LOGGER = logging.getLogger(__name__)


    class Model:
        """Loads the weights once; ``infer`` serves Triton's batches."""

        def __init__(self) -> None:
            with np.load(model_file("mlp.npz")) as weights:
                self.layers = [(weights[f"w{n}"], weights[f"b{n}"]) for n in (1, 2)]
            LOGGER.info("Model loaded: %d layers", len(self.layers))

        def predict(self, image: np.ndarray) -> dict[str, np.ndarray]:
            (w1, b1), (w2, b2) = self.layers
            hidden = np.maximum(image.astype(np.float64) @ w1 + b1, 0.0)
            logits = hidden @ w2 + b2
            exp = np.exp(logits - logits.max(axis=1, keepdims=True))
            probs = exp / exp.sum(axis=1, keepdims=True)
            return {"probs": probs.astype(np.float32), "label": probs.argmax(axis=1, keepdims=True)}

        @batch
        def infer(self, image: np.ndarray) -> dict[str, np.ndarray]:
            return self.predict(image)
'''


def swap_in_the_mlp(project: Path) -> None:
    """What the README tells a user to do: remove the placeholder, add the model and its weights."""
    package = project / "src" / "my_service"
    for leftover in (package / "placeholder.py", package / "weights" / "placeholder.json",
                     project / "tests" / "test_placeholder.py"):  # fmt: skip
        leftover.unlink()
    rng = np.random.default_rng(7)
    np.savez(
        package / "weights" / "mlp.npz",
        w1=rng.normal(0, 0.3, (64, HIDDEN)), b1=rng.normal(0, 0.1, HIDDEN),
        w2=rng.normal(0, 0.3, (HIDDEN, 10)), b2=rng.normal(0, 0.1, 10),
    )  # fmt: skip
    (package / "model.py").write_text(textwrap.dedent(MLP_MODEL).lstrip())


def make(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", *args, f"PY={sys.executable}"], cwd=project, env=env, capture_output=True, text=True, timeout=1800
    )


@pytest.mark.bake
def test_a_real_model_passes_the_projects_own_gates(tmp_path: Path) -> None:
    project = bake(tmp_path / "bake", **ANSWERS)
    swap_in_the_mlp(project)
    site = tmp_path / "site"  # the project and its runtime, beside the shared test environment (as test_bake)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
         str(site), str(project), str(project / "runtime")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(site)}
    golden = make(project, env, "golden")
    assert golden.returncode == 0, golden.stdout + golden.stderr
    assert (project / "tests" / "golden" / "samples.npz").is_file()
    report = tmp_path / "report.xml"
    args = f'-p no:cacheprovider -m "not container and not k8s" --junitxml={report}'
    test = make(project, env, "test", f"PYTEST_ARGS={args}")
    assert test.returncode == 0, test.stdout[-5000:] + test.stderr[-5000:]
    cases = list(ElementTree.parse(report).getroot().iter("testcase"))
    skipped = [case.get("name") for case in cases if case.find("skipped") is not None]
    assert skipped == []
    ran = {case.get("classname", "").rpartition(".")[2] for case in cases}
    assert {"test_golden", "test_service", "test_model", "test_model_files"} <= ran
    lint = make(project, env, "lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr
