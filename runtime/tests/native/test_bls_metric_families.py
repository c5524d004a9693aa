"""The BLS metrics are declared twice, by the backend (which counts each call as its last response arrives:
native/src/triton/metrics.rs) and by the worker (which counts the calls that fail before they reach the backend:
tritonrt.bls.backend_api); Triton's registry takes an update only from the family it was declared as, so both
must give the same names, descriptions and buckets."""

from __future__ import annotations

import re

from native_testlib import NATIVE_DIR

from tritonrt.bls import backend_api

METRICS_RS = (NATIVE_DIR / "src" / "triton" / "metrics.rs").read_text()


def rust_string_after(name: str) -> str:
    """The description given right after the quoted metric name in metrics.rs."""
    found = re.search(re.escape(f'"{name}"') + r',\s*"([^"]*)"', METRICS_RS)
    assert found, f"{name} is not declared in metrics.rs"
    return found.group(1)


def test_the_backend_declares_the_bls_families_as_the_worker_does():
    for family in (backend_api._CALLS._family, backend_api._ERRORS._family, backend_api._SECONDS._family):
        assert rust_string_after(family.name) == family.description, family.name
    buckets = re.search(r"pub const BLS_BUCKETS: \[f64; \d+\] = \[([^\]]*)\];", METRICS_RS)
    assert buckets, "BLS_BUCKETS is not in metrics.rs"
    assert tuple(float(b) for b in buckets.group(1).split(",")) == backend_api._SECONDS._family.buckets
