"""What every model user shares: which model, how requests are built, and a per-class plan made once.

The HTTP and gRPC users (``http_user``, ``grpc_users``) mix this in; they only say how to fetch the
model's configuration over their protocol.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from loadtests.errors import LoadTestSetupError
from loadtests.model_spec import ModelSpec
from loadtests.payload import Payload, load_samples, random_inputs


@dataclasses.dataclass(frozen=True)
class Plan:
    """A model's spec and the payloads users send to it, in turn."""

    spec: ModelSpec
    payloads: tuple[Payload, ...]


TTFR_REQUEST_TYPE = "gRPC TTFR"
"""Request type of time-to-first-response entries: shown in reports, left out of the SLO gates."""

_PLANS: dict[tuple[type, str], Plan] = {}


class ModelUserMixin:
    """Class attributes a locustfile sets on its users; ``model_name`` is required.

    Example::

        class Identity(KServeHttpUser):
            model_name = "identity"
            batch_size = 4
    """

    protocol: ClassVar[str] = ""
    model_name: ClassVar[str] = ""
    model_version: ClassVar[str] = ""
    batch_size: ClassVar[int] = 1
    dynamic_dim: ClassVar[int] = 4
    seed: ClassVar[int] = 0
    samples: ClassVar[str | None] = None

    @classmethod
    def fetch_model_config(cls, host: str) -> Mapping[str, Any]:
        """Triton's JSON model configuration for ``cls.model_name``, fetched from ``host``."""
        raise NotImplementedError

    @classmethod
    def prepare(cls, host: str) -> Plan:
        """Fetch the model's config and build the payloads, once per class and host; raise LoadTestSetupError."""
        key = (cls, host)
        if key not in _PLANS:
            if not cls.model_name:
                raise LoadTestSetupError(f"{cls.__name__}.model_name is empty; set model_name = '<your model>'")
            spec = ModelSpec.from_config(cls.fetch_model_config(host))
            if cls.samples:
                payloads = tuple(load_samples(cls.samples, spec))
            else:
                payloads = (random_inputs(spec, cls.batch_size, cls.seed, cls.dynamic_dim),)
            _PLANS[key] = Plan(spec, payloads)
        return _PLANS[key]


def batch_of(spec: ModelSpec, payload: Payload) -> int | None:
    """The batch size of a request (first axis of its inputs), or None for a model without batching."""
    if not spec.batched:
        return None
    return int(next(iter(payload.values())).shape[0])
