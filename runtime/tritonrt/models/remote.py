"""How a RemoteTriton puts its models into a server it does not own: wait for the server, then upload each
model through the repository API's load with overrides (PyTriton 0.7's way), or, with
``RemoteTriton(..., model_repository=<folder>)`` (a tritonrt extension, for a server started with
``--model-repository=<folder>`` in explicit model control mode), write it into that folder and load it by
name; unload it when done.

Example::

    remote = RemoteModels(ServerApi.from_url("http://localhost:8000", token), token, repository=None)
    remote.wait_until_ready(120)
    remote.load(model)   # after the model's workers started
    remote.unload(model)
"""

from __future__ import annotations

import logging
import pathlib

from tritonrt._access import access_headers
from tritonrt.constants import CREATE_TRITON_CLIENT_TIMEOUT_S
from tritonrt.models import repository
from tritonrt.models.bound import BoundModel
from tritonrt.server.api import ServerApi

__all__ = ["RemoteModels"]

LOGGER = logging.getLogger("tritonrt")


class RemoteModels:
    """The models of one RemoteTriton in one remote server (``repository``: a folder the server reads, or None
    to upload)."""

    def __init__(self, api: ServerApi, token: str | None, repository: str | pathlib.Path | None):
        self.api = api
        self._token = token
        self.repository = None if repository is None else pathlib.Path(repository)

    def wait_until_ready(self, timeout_s: float) -> None:
        """Block until the server is live and ready.

        Raises:
            TimeoutError: it was not ready within ``timeout_s`` (PyTriton 0.7's error).
        """
        from tritonrt.client.exceptions import PyTritonClientTimeoutError  # the clients: imported when used
        from tritonrt.client.utils import create_client_from_url, wait_for_server_ready

        client = create_client_from_url(self.api.url)
        try:
            headers = access_headers("http" if self.api.http_port else "grpc", self._token)
            wait_for_server_ready(client, timeout_s, headers)
        except PyTritonClientTimeoutError as error:
            raise TimeoutError(f"The Triton server at {self.api.url} is not ready: {error}") from None
        finally:
            client.close()

    def publish(self, model: BoundModel) -> None:
        """Write the model's files into the shared folder, if there is one (uploads need nothing yet)."""
        if self.repository is not None:
            self.repository.mkdir(parents=True, exist_ok=True)
            repository.write_model(self.repository, model.config, model.sockets, model.token)

    def load(self, model: BoundModel) -> None:
        """Load the model: by name from the shared folder, or uploaded with its config, backend library and
        connection file."""
        if self.repository is not None:
            self.api.load_model(model.name)
            return
        config, files = repository.upload_request(model.config, model.sockets, model.token)
        self.api.load_model(model.name, config, files)

    def unload(self, model: BoundModel) -> None:
        """Unload the model (a server that is gone already is logged) and remove its folder, if written."""
        try:
            self.api.unload_model(model.name, timeout_s=CREATE_TRITON_CLIENT_TIMEOUT_S)
        except Exception as error:
            LOGGER.warning("Could not unload %s: %s", model.name, error)
        if self.repository is not None:
            repository.remove_model(self.repository, model.name)
