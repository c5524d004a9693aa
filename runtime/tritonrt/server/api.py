"""The few server calls tritonrt itself makes: liveness, model readiness and loading/unloading models (with the
token)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from tritonrt._access import access_headers
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError

__all__ = ["ServerApi"]

_LOAD_TIMEOUT_S = 300
_BUSY_STATES = ("READY", "LOADING", "UNLOADING")


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
        """``http://host:port`` or ``grpc://host:port`` (no scheme: HTTP; no port: the scheme's default)."""
        from tritonrt.client._transport import TritonUrl  # the clients' URL rules (imported when needed: heavy)
        from tritonrt.client.exceptions import PyTritonClientInvalidUrlError

        try:
            parsed = TritonUrl.from_url(url)
        except PyTritonClientInvalidUrlError as error:
            raise PyTritonBadParameterError(str(error)) from None
        if parsed.scheme == "http":
            return cls(parsed.hostname, parsed.port, None, token)
        return cls(parsed.hostname, None, parsed.port, token)

    @property
    def url(self) -> str:
        """The server's address as a client takes it (HTTP when the server has it, else gRPC)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}" if self.http_port is not None else f"grpc://{self.grpc_url}"

    def _http(self, method: str, path: str, timeout: float, body: bytes = b"") -> tuple[int, str]:
        connection = http.client.HTTPConnection(self.host, self.http_port, timeout=timeout)
        headers = access_headers("http", self._token)
        try:
            connection.request(method, path, body=body if method == "POST" else None, headers=headers)
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
                return bool(client.is_server_live(headers=self._grpc_headers(), client_timeout=1))
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
                return bool(client.is_model_ready(name, headers=self._grpc_headers(), client_timeout=5))
        except Exception:
            return False

    def instance_count(self, name: str) -> int | None:
        """How many instances the model's configuration, as the server serves it now, asks for (a load with a
        config override may have changed it); None when the server cannot say."""
        try:
            if self.http_port is not None:
                status, text = self._http("GET", f"/v2/models/{urllib.parse.quote(name, safe='')}/config", timeout=5)
                config = json.loads(text) if status == 200 else None
            else:
                import tritonclient.grpc as grpcclient

                with grpcclient.InferenceServerClient(self.grpc_url) as client:
                    answer = client.get_model_config(name, headers=self._grpc_headers(), as_json=True, client_timeout=5)
                    config = answer.get("config")
        except Exception:
            return None
        if not isinstance(config, dict):
            return None
        total = 0
        for group in config.get("instance_group") or [{}]:
            count, gpus = int(group.get("count", 1)), len(group.get("gpus") or [])
            total += count * gpus if group.get("kind") == "KIND_GPU" and gpus else count
        return total

    def load_model(self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None) -> None:
        """Load (or reload) a model, from the server's repository or from ``config`` (JSON) and ``files``
        (``{"file:<path>": content}``); raise with the server's reason when it fails."""
        body = b""
        if config is not None:
            from tritonrt.client._http import load_request_body  # the clients' form of it (heavy: imported here)

            body = json.dumps(load_request_body(config, files)).encode()
        self._post(
            f"load model {name!r}",
            f"/v2/repository/models/{urllib.parse.quote(name, safe='')}/load",
            body,
            lambda client, headers: client.load_model(name, headers, config, files, client_timeout=_LOAD_TIMEOUT_S),
        )

    def unload_model(self, name: str, timeout_s: float = _LOAD_TIMEOUT_S) -> None:
        """Unload a model."""
        self._post(
            f"unload model {name!r}",
            f"/v2/repository/models/{urllib.parse.quote(name, safe='')}/unload",
            b"",
            lambda client, headers: client.unload_model(name, headers=headers, client_timeout=timeout_s),
            timeout_s,
        )

    def model_states(self, timeout_s: float = 5) -> dict[str, str]:
        """Each model of the server's repository and its state (``READY``, ``UNLOADING``, ``UNAVAILABLE``, ...),
        from Triton's repository index; raise PyTritonRuntimeError when the server cannot say."""
        try:
            entries = self._repository_index(timeout_s)
        except (OSError, ValueError) as error:  # unreachable, or not an index
            raise PyTritonRuntimeError(f"Could not read the model repository index: {error}") from error
        states: dict[str, str] = {}
        for entry in entries:
            name, state = str(entry.get("name", "")), str(entry.get("state") or "UNAVAILABLE")
            if states.get(name) not in _BUSY_STATES:  # a model with several versions: a busy one counts
                states[name] = state
        return states

    def _repository_index(self, timeout_s: float) -> list[dict[str, Any]]:
        if self.http_port is not None:
            status, text = self._http("POST", "/v2/repository/index", timeout=timeout_s, body=b"{}")
            if status != 200:
                raise ValueError(f"HTTP {status}: {text}")
            return list(json.loads(text))
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        try:
            with grpcclient.InferenceServerClient(self.grpc_url) as client:
                index = client.get_model_repository_index(
                    headers=self._grpc_headers(), as_json=True, client_timeout=timeout_s
                )
        except InferenceServerException as error:
            raise ValueError(error.message()) from None
        return list(index.get("models", []))

    def update_trace_settings(self, name: str, settings: Mapping[str, Any]) -> None:
        """Set a model's own trace settings (Triton's trace API; see ``tritonrt.models.trace``)."""
        self._post(
            f"set the trace settings of model {name!r}",
            f"/v2/models/{urllib.parse.quote(name, safe='')}/trace/setting",
            json.dumps(settings).encode(),
            lambda client, headers: client.update_trace_settings(name, dict(settings), headers=headers),
        )

    def _post(
        self,
        what: str,
        path: str,
        body: bytes,
        grpc_call: Callable[[Any, dict[str, str]], object],
        timeout_s: float = _LOAD_TIMEOUT_S,
    ) -> None:
        """POST ``body`` to ``path`` over HTTP, or make ``grpc_call(client, headers)``; raise with the reason."""
        if self.http_port is not None:
            status, text = self._http("POST", path, timeout=timeout_s, body=body)
            if status == 200:
                return
            try:
                reason = json.loads(text).get("error", text)
            except ValueError:
                reason = text
        else:
            import tritonclient.grpc as grpcclient
            from tritonclient.utils import InferenceServerException

            try:
                with grpcclient.InferenceServerClient(self.grpc_url) as client:
                    grpc_call(client, self._grpc_headers())
                return
            except InferenceServerException as error:
                reason = error.message()
        log = f"\nServer log (last lines):\n{self.on_error_log()}" if self.on_error_log else ""
        raise PyTritonRuntimeError(f"Could not {what}: {reason}{log}")
