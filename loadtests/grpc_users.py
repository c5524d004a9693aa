"""Locust users for Triton's gRPC protocol through tritonclient: unary calls and, for decoupled models,
a stream that records the time to the first response and to the final one.

Example (a locustfile)::

    from loadtests.grpc_users import TritonGrpcStreamUser, TritonGrpcUser

    class IdentityGrpc(TritonGrpcUser):
        model_name = "identity"

    class TokensStream(TritonGrpcStreamUser):
        model_name = "tokens"
"""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import grpc.experimental.gevent
import tritonclient.grpc as grpcclient
from locust import User, task
from tritonclient.utils import InferenceServerException

from loadtests.errors import LoadTestSetupError
from loadtests.model_spec import ModelSpec
from loadtests.model_user import TTFR_REQUEST_TYPE, ModelUserMixin, Plan, batch_of
from loadtests.payload import Payload
from loadtests.validation import check_outputs

# grpc's gevent support: after Locust has monkey-patched the standard library (importing locust does that),
# before any channel exists. Without it every gRPC call would block all users of this process.
grpc.experimental.gevent.init_gevent()


class RequestFailed(Exception):
    """A failed gRPC request: the server's error, or a response that does not match the model's outputs."""


class TritonGrpcUser(ModelUserMixin, User):
    """Calls ``ModelInfer`` back to back on ``host`` (``host:port``) and reports each call to Locust."""

    abstract = True
    protocol: ClassVar[str] = "grpc"
    request_type: ClassVar[str] = "gRPC"
    config_timeout_s: ClassVar[float] = 10.0

    @classmethod
    def fetch_model_config(cls, host: str) -> Mapping[str, Any]:
        client = grpcclient.InferenceServerClient(host)
        try:
            answer = client.get_model_config(
                cls.model_name, cls.model_version, as_json=True, client_timeout=cls.config_timeout_s
            )
        except InferenceServerException as error:
            raise LoadTestSetupError(
                f"cannot get the config of model '{cls.model_name}' from gRPC endpoint {host}: "
                f"{error.message()}; check model_name on {cls.__name__} and that --url is the server's gRPC address"
            ) from None
        finally:
            client.close()
            del client  # see on_stop
        return answer["config"]

    def on_start(self) -> None:
        plan = self.prepare(self.host)
        self._spec = plan.spec
        self._client = grpcclient.InferenceServerClient(self.host)
        self._outputs = [grpcclient.InferRequestedOutput(t.name) for t in plan.spec.outputs]
        self._requests = itertools.cycle([(_inputs(plan, p), batch_of(plan.spec, p)) for p in plan.payloads])

    def on_stop(self) -> None:
        # With grpc's gevent support a client still alive when the interpreter exits can hang the exit:
        # close it and drop it now, while the event loop runs.
        client = self.__dict__.pop("_client", None)
        if client is not None:
            client.close()

    @task
    def infer(self) -> None:
        """The one task: subclasses change what a request is by overriding ``send_request``."""
        self.send_request()

    def send_request(self) -> None:
        inputs, batch = next(self._requests)
        start = time.perf_counter()
        length = 0
        error: Exception | None = None
        try:
            result = self._client.infer(
                self.model_name, inputs, model_version=self.model_version, outputs=self._outputs
            )
            length = _check(self._spec, batch, result)
        except InferenceServerException as exc:
            error = RequestFailed(str(exc))
        except RequestFailed as exc:
            error = exc
        self._report(self.request_type, self.model_name, start, time.perf_counter(), length, error)

    def _report(
        self, request_type: str, name: str, start: float, end: float, length: int, error: Exception | None
    ) -> None:
        self.environment.events.request.fire(
            request_type=request_type,
            name=name,
            response_time=(end - start) * 1000.0,
            response_length=length,
            exception=error,
            context={},
        )


class TritonGrpcStreamUser(TritonGrpcUser):
    """Sends each request on a gRPC stream and waits for its final response (decoupled models may send
    many). Reports the total time as ``gRPC stream`` and the time to the first response as ``gRPC TTFR``.
    """

    abstract = True
    protocol: ClassVar[str] = "grpc-stream"
    request_type: ClassVar[str] = "gRPC stream"
    stream_timeout_s: ClassVar[float] = 60.0

    def on_start(self) -> None:
        super().on_start()
        self._responses: queue.Queue[tuple[float, Any, Exception | None]] = queue.Queue()
        self._ids = itertools.count()
        self._client.start_stream(callback=self._on_response)

    def on_stop(self) -> None:
        if "_client" in self.__dict__:
            self._client.stop_stream(cancel_requests=True)
        super().on_stop()

    def _on_response(self, result: Any, error: Exception | None) -> None:
        self._responses.put((time.perf_counter(), result, error))

    def send_request(self) -> None:
        inputs, batch = next(self._requests)
        request_id = str(next(self._ids))
        start = time.perf_counter()
        try:
            self._client.async_stream_infer(
                self.model_name,
                inputs,
                model_version=self.model_version,
                outputs=self._outputs,
                request_id=request_id,
                enable_empty_final_response=True,
            )
        except InferenceServerException as exc:
            self._report(self.request_type, self.model_name, start, time.perf_counter(), 0, RequestFailed(str(exc)))
            return
        first, length, error = self._await_final(request_id, batch)
        end = time.perf_counter()
        if first is not None:
            self._report(TTFR_REQUEST_TYPE, self.model_name, start, first, 0, None)
        self._report(self.request_type, self.model_name, start, end, length, error)

    def _await_final(self, request_id: str, batch: int | None) -> tuple[float | None, int, Exception | None]:
        """Read responses until ``request_id``'s final one: (first arrival, payload bytes, first problem)."""
        first: float | None = None
        length = 0
        error: Exception | None = None
        while True:
            try:
                arrived, result, stream_error = self._responses.get(timeout=self.stream_timeout_s)
            except queue.Empty:
                return first, length, RequestFailed(f"no final response within {self.stream_timeout_s:g} s")
            if stream_error is not None:
                return first, length, RequestFailed(str(stream_error))
            response = result.get_response()
            if response.id != request_id:
                continue  # a late response to an earlier request that already failed
            if response.outputs:
                first = arrived if first is None else first
                try:
                    length += _check(self._spec, batch, result)
                except RequestFailed as exc:
                    error = error or exc
            if response.parameters["triton_final_response"].bool_param:
                return first, length, error


def _inputs(plan: Plan, payload: Payload) -> list[grpcclient.InferInput]:
    inputs = []
    for name, array in payload.items():
        datatype = next(t.datatype for t in plan.spec.inputs if t.name == name)
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _check(spec: ModelSpec, batch: int | None, result: Any) -> int:
    """Raise RequestFailed when ``result`` does not match ``spec``; return its payload size in bytes."""
    response = result.get_response()
    reported = {o.name: (o.datatype, list(o.shape)) for o in response.outputs}
    problem = check_outputs(spec, batch, reported, result.as_numpy)
    if problem:
        raise RequestFailed(problem)
    return sum(len(raw) for raw in response.raw_output_contents)
