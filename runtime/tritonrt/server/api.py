"""The few server calls tritonrt itself makes: liveness, model readiness and loading/unloading models (with the
token)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable

from tritonrt._access import access_headers
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError

__all__ = ["ServerApi"]

_LOAD_TIMEOUT_S = 300


class ServerApi:
    """Talks to one server over HTTP (or gRPC when HTTP is off).

    Example::

        api = ServerApi(host="127.0.0.1", http_port=8000, grpc_port=8001, token=token)
        api.load_model("double")
    """

    def __init__(self, host: str, http_port: int | None, grpc_port: int | None, token: str | None):
        self.host = host
        self.http_port = http_port
        self.grpc_url = f"{host}:{grpc_port}" if grpc_port else None
        self._token = token
        self.on_error_log: Callable[[], str] | None = None

    @classmethod
    def from_url(cls, url: str, token: str | None) -> ServerApi:
        """``http://host:port`` or ``grpc://host:port`` (bare ``host:port`` is HTTP)."""
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme not in ("http", "grpc") or not parsed.hostname:
            raise PyTritonBadParameterError(f"Invalid server URL {url!r}: use http://host:port or grpc://host:port.")
        if parsed.scheme == "http":
            return cls(parsed.hostname, parsed.port or 8000, None, token)
        return cls(parsed.hostname, None, parsed.port or 8001, token)

    def _http(self, method: str, path: str, timeout: float) -> tuple[int, str]:
        connection = http.client.HTTPConnection(self.host, self.http_port, timeout=timeout)
        headers = access_headers("http", self._token)
        try:
            connection.request(method, path, body=b"" if method == "POST" else None, headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            connection.close()

    def _grpc_headers(self) -> dict[str, str]:
        return access_headers("grpc", self._token)

    def is_live(self) -> bool:
        """True when the server answers its liveness check."""
        try:
            if self.http_port is not None:
                return self._http("GET", "/v2/health/live", timeout=1)[0] == 200
            import tritonclient.grpc as grpcclient

            with grpcclient.InferenceServerClient(self.grpc_url) as client:
                return client.is_server_live(headers=self._grpc_headers(), client_timeout=1)
        except Exception:
            return False

    def is_model_ready(self, name: str) -> bool:
        """True when the server reports model ``name`` ready (False too when it cannot be asked)."""
        try:
            if self.http_port is not None:
                quoted = urllib.parse.quote(name, safe="")
                return self._http("GET", f"/v2/models/{quoted}/ready", timeout=5)[0] == 200
            import tritonclient.grpc as grpcclient

            with grpcclient.InferenceServerClient(self.grpc_url) as client:
                return client.is_model_ready(name, headers=self._grpc_headers(), client_timeout=5)
        except Exception:
            return False

    def load_model(self, name: str) -> None:
        """Load (or reload) a model; raise with the server's reason when it fails."""
        self._repository_call("load", name)

    def unload_model(self, name: str) -> None:
        """Unload a model."""
        self._repository_call("unload", name)

    def _repository_call(self, action: str, name: str) -> None:
        quoted = urllib.parse.quote(name, safe="")
        if self.http_port is not None:
            status, body = self._http("POST", f"/v2/repository/models/{quoted}/{action}", timeout=_LOAD_TIMEOUT_S)
            if status == 200:
                return
            try:
                reason = json.loads(body).get("error", body)
            except ValueError:
                reason = body
        else:
            import tritonclient.grpc as grpcclient
            from tritonclient.utils import InferenceServerException

            try:
                with grpcclient.InferenceServerClient(self.grpc_url) as client:
                    method = client.load_model if action == "load" else client.unload_model
                    method(name, headers=self._grpc_headers(), client_timeout=_LOAD_TIMEOUT_S)
                return
            except InferenceServerException as error:
                reason = error.message()
        log = f"\nServer log (last lines):\n{self.on_error_log()}" if self.on_error_log else ""
        raise PyTritonRuntimeError(f"Could not {action} model {name!r}: {reason}{log}")
