"""Load tests for the {{ cookiecutter.model_name }} model, run by ``make loadtest``.

See loadtests/README.md for the options, the gates and the reports.

The users read the model's inputs and outputs from the running server (``/v2/models/<model>/config``),
send seeded random tensors of those shapes (or the samples given with ``--samples``) and check that
every response has the declared output names, datatypes and shapes. ``python -m loadtests`` runs the
users of one protocol: HTTP by default, gRPC with ``--protocol grpc``{% if cookiecutter.streaming == "yes" %},
the gRPC stream with ``--stream``{% endif %}.
"""

from loadtests.grpc_users import {% if cookiecutter.streaming == "yes" %}TritonGrpcStreamUser, {% endif %}TritonGrpcUser
from loadtests.http_user import KServeHttpUser

MODEL_NAME = "{{ cookiecutter.model_name }}"


class ModelHttpUser(KServeHttpUser):
    """KServe v2 HTTP with binary tensors (``--json`` for JSON)."""

    model_name = MODEL_NAME


class ModelGrpcUser(TritonGrpcUser):
    """Triton gRPC, one ModelInfer call at a time per user."""

    model_name = MODEL_NAME
{%- if cookiecutter.streaming == "yes" %}


class ModelStreamUser(TritonGrpcStreamUser):
    """The streaming (decoupled) model over a gRPC stream: time to first response and total time."""

    model_name = MODEL_NAME + "_stream"
{%- endif %}
