"""The rendered Kubernetes manifests of deploy/k8s and the tools that check them, for the k8s tests.

``render`` runs ``make k8s`` (kubectl's kustomize) and loads the objects of each overlay; the other helpers
find objects and read the Deployment's settings the way the kubelet reads them. A helper that needs a tool
(kubectl, promtool, prometheus, checkov) skips the test, naming the tool and how to install it, when the
tool is missing.

Example::

    overlays = render(tmp_path, IMAGE)
    deployment = find(overlays["cpu"], "Deployment")
    container(deployment)["resources"]["limits"]["memory"]  # "2Gi"
"""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from conftest import skip_or_fail_under_ci

from tools.slo import read_objectives

__all__ = [
    "CRD_KINDS",
    "DEPLOY_DIR",
    "IMAGE",
    "KUBERNETES_VERSION",
    "NAME",
    "OVERLAYS",
    "PROJECT",
    "PROJECT_DIR",
    "container",
    "crd_schema",
    "deploy_copy",
    "environment",
    "find",
    "quantity",
    "render",
    "require_tool",
    "slo",
]

PROJECT_DIR = Path(__file__).resolve().parents[1]
DEPLOY_DIR = PROJECT_DIR / "deploy" / "k8s"
OVERLAYS = ("gpu", "cpu")
# The Kubernetes version whose OpenAPI schemas the objects must satisfy (kubernetes-validate ships them).
KUBERNETES_VERSION = "1.35.0"
# The custom resources (prometheus-operator's CRDs) and the kubernetes-validate cannot check.
CRD_KINDS = ("PodMonitor", "PrometheusRule")
# What production renders: an image pinned by digest (make k8s IMAGE=<repo>@sha256:<digest>).
PROJECT = "{{ cookiecutter.project }}"  # also the image's name
NAME = "{{ cookiecutter.project | replace('_', '-') }}"  # the Kubernetes objects' name and namespace
IMAGE = f"registry.example.com/{PROJECT}@sha256:{'0123456789abcdef' * 4}"
_INSTALL = {
    "kubectl": "install kubectl (https://kubernetes.io/docs/tasks/tools/); its built-in kustomize renders",
    "promtool": "install Debian's or Ubuntu's prometheus package (apt-get install prometheus)",
    "prometheus": "install Debian's or Ubuntu's prometheus package (apt-get install prometheus)",
    "checkov": "run make checkov (a venv of its own in .venv-checkov), or set CHECKOV to a checkov binary",
}
_QUANTITY = re.compile(r"([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?")
_SUFFIXES = {
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def require_tool(name: str) -> str:
    """The path of ``name`` (checkov: also ``$CHECKOV`` and ``.venv-checkov``); skips the test without it
    (fails it under CI)."""
    candidates = [shutil.which(name)]
    if name == "checkov":
        candidates = [
            os.environ.get("CHECKOV"),
            str(PROJECT_DIR / ".venv-checkov" / "bin" / "checkov"),
            *candidates,
        ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    skip_or_fail_under_ci(f"{name} not found: {_INSTALL[name]}")


def deploy_copy(folder: Path) -> Path:
    """``folder`` with a copy of this project's Makefile and deploy/: what ``make k8s`` reads and writes
    (it writes a token when there is none), so the tests leave the project as it was."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_DIR / "Makefile", folder)
    shutil.copytree(PROJECT_DIR / "deploy", folder / "deploy", dirs_exist_ok=True)
    return folder


def render(output: Path, image: str = IMAGE, project: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """``make k8s IMAGE=image`` into ``output``; the objects of each overlay, as kubectl would apply them.

    ``project``: where to run it, a ``deploy_copy``; by default a new one in ``output``."""
    require_tool("kubectl")
    project = project or deploy_copy(output / "project")
    result = subprocess.run(
        ["make", "--no-print-directory", "k8s", f"IMAGE={image}", f"K8S_DIR={output}"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"make k8s failed:\n{result.stdout}\n{result.stderr}"
    return {
        overlay: list(yaml.safe_load_all((output / f"{overlay}.yaml").read_text())) for overlay in OVERLAYS
    }


def find(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one object of ``kind`` (fails if there are none or several)."""
    found = [item for item in objects if item["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's only container."""
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def environment(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The container's environment as the kubelet sets it: plain values, and Secret keys decoded."""
    env = {}
    for variable in container(find(objects, "Deployment")).get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        reference = variable["valueFrom"]["secretKeyRef"]
        secret = next(
            s for s in objects if s["kind"] == "Secret" and s["metadata"]["name"] == reference["name"]
        )
        env[variable["name"]] = base64.b64decode(secret["data"][reference["key"]]).decode()
    return env


def quantity(text: str | int) -> float:
    """A Kubernetes quantity as a number: ``"1Gi"`` -> 1073741824, ``"500m"`` -> 0.5."""
    match = _QUANTITY.fullmatch(str(text))
    assert match, f"not a quantity this test reads: {text!r}"
    return float(match.group(1)) * _SUFFIXES.get(match.group(2) or "", 1)


def slo() -> dict[str, str]:
    """deploy/k8s/base/slo.env: the objectives and the autoscaler's target, name -> value."""
    return read_objectives(DEPLOY_DIR / "base" / "slo.env")


def crd_schema(kind: str) -> dict[str, Any]:
    """The JSON schema of a prometheus-operator custom resource, strict like the API server.

    Made from the pydantic models of cloudcoil-models-prometheus-operator, which are generated from
    prometheus-operator's published CRDs. Made strict: an object that declares its properties takes no
    others (the API server's strict field validation rejects unknown fields the same way).
    """
    from cloudcoil.models.prometheus_operator import v1

    return _strict(copy.deepcopy(getattr(v1, kind).model_json_schema(by_alias=True, mode="validation")))


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        if isinstance(node.get("pattern"), str) and "(?i)" in node["pattern"]:
            # Go's inline flag may follow "^"; Python's must come first.
            node["pattern"] = "(?i)" + node["pattern"].replace("(?i)", "")
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)
    return node
