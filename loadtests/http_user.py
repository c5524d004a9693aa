"""A Locust user for the KServe v2 HTTP protocol: binary-tensor requests (or JSON), every response checked.

Example (a locustfile)::

    from loadtests.http_user import KServeHttpUser

    class IdentityHttp(KServeHttpUser):
        model_name = "identity"
"""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

import tritonclient.http as httpclient
from locust import task
from locust.contrib.fasthttp import FastHttpUser

from loadtests.errors import LoadTestSetupError
from loadtests.model_user import ModelUserMixin, Plan, batch_of
from loadtests.payload import Payload
from loadtests.validation import check_outputs

HEADER_LENGTH = "Inference-Header-Content-Length"
EncodedRequest = tuple[bytes, dict[str, str], int | None]

_ENCODED: dict[tuple[type, str], list[EncodedRequest]] = {}


class KServeHttpUser(ModelUserMixin, FastHttpUser):
    """Sends ``POST /v2/models/<model>/infer`` back to back; a wrong status, output name, datatype or shape
    marks the request failed. Set ``binary = False`` (or pass ``--json``) to send JSON-encoded tensors.
    """

    abstract = True
    protocol: ClassVar[str] = "http"
    binary: ClassVar[bool] = True
    config_timeout_s: ClassVar[float] = 10.0

    @classmethod
    def model_path(cls) -> str:
        version = f"/versions/{quote(cls.model_version)}" if cls.model_version else ""
        return f"/v2/models/{quote(cls.model_name)}{version}"

    @classmethod
    def fetch_model_config(cls, host: str) -> Mapping[str, Any]:
        url = f"{host.rstrip('/')}{cls.model_path()}/config"
        try:
            with urllib.request.urlopen(url, timeout=cls.config_timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise LoadTestSetupError(
                f"{url} answered {error.code}: {_error_text(error.read())}; check model_name "
                f"'{cls.model_name}' on {cls.__name__} against the models the server serves"
            ) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise LoadTestSetupError(
                f"cannot reach {url}: {reason}; start the service or pass --url with its HTTP address"
            ) from None

    @classmethod
    def encoded_requests(cls, host: str, plan: Plan) -> list[EncodedRequest]:
        """The plan's payloads as ready-to-send request bodies, built once per class and host."""
        key = (cls, host)
        if key not in _ENCODED:
            _ENCODED[key] = [cls._encode(plan, payload) for payload in plan.payloads]
        return _ENCODED[key]

    @classmethod
    def _encode(cls, plan: Plan, payload: Payload) -> EncodedRequest:
        inputs = []
        for name, array in payload.items():
            datatype = next(t.datatype for t in plan.spec.inputs if t.name == name)
            tensor = httpclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array, binary_data=cls.binary)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput(t.name, binary_data=cls.binary) for t in plan.spec.outputs]
        body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        if json_size is None:
            headers = {"Content-Type": "application/json"}
        else:
            headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(json_size)}
        return body, headers, batch_of(plan.spec, payload)

    def on_start(self) -> None:
        plan = self.prepare(self.host)
        self._spec = plan.spec
        self._infer_path = f"{self.model_path()}/infer"
        self._requests = itertools.cycle(self.encoded_requests(self.host, plan))

    @task
    def infer(self) -> None:
        body, headers, batch = next(self._requests)
        with self.client.post(self._infer_path, data=body, headers=headers, catch_response=True) as response:
            problem = self._problem(response, batch)
            if problem:
                response.failure(problem)
            else:
                response.success()

    def _problem(self, response: Any, batch: int | None) -> str | None:
        if response.status_code != 200:
            if not response.status_code:
                return f"no response: {response.error}"
            return f"HTTP {response.status_code}: {_error_text(response.content)}"
        header = response.headers.get(HEADER_LENGTH)
        try:
            result = httpclient.InferenceServerClient.parse_response_body(
                response.content, header_length=int(header) if header else None
            )
            outputs = result.get_response().get("outputs", [])
            reported = {o["name"]: (o["datatype"], o["shape"]) for o in outputs}
        except Exception as error:  # any malformed body is a failed request, whatever the parser raised
            return f"response is not a KServe v2 inference response: {error}"
        return check_outputs(self._spec, batch, reported, result.as_numpy)


def _error_text(body: bytes | None) -> str:
    """The ``error`` field of a KServe v2 error body, or the body itself."""
    text = (body or b"").decode("utf-8", "replace")
    try:
        return str(json.loads(text)["error"])
    except (ValueError, KeyError, TypeError):
        return text[:200] or "(empty body)"
