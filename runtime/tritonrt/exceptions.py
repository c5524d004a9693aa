"""Exceptions raised by tritonrt, named as in PyTriton so that ``except`` clauses carry over."""

__all__ = [
    "MessageError",
    "PyTritonBadParameterError",
    "PyTritonError",
    "PyTritonInvalidOperationError",
    "PyTritonModelConfigError",
    "PyTritonRuntimeError",
    "PyTritonUnrecoverableError",
    "PyTritonValidationError",
]


class MessageError(Exception):
    """An exception whose text is kept in ``message`` (the base of the runtime's and the clients' errors)."""

    def __init__(self, message: str):
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        """The error message."""
        return self._message

    def __str__(self) -> str:
        return self._message


class PyTritonError(MessageError):
    """Base class of every tritonrt runtime error."""


class PyTritonValidationError(PyTritonError):
    """A definition (model, tensor, config) failed validation."""


class PyTritonInvalidOperationError(PyTritonError):
    """The operation is not allowed in the current state (e.g. bind after run)."""


class PyTritonBadParameterError(PyTritonError):
    """A parameter has a wrong value."""


class PyTritonModelConfigError(PyTritonError):
    """The model configuration is inconsistent."""


class PyTritonUnrecoverableError(PyTritonError):
    """Raise from an inference callable to stop the server: the model cannot go on."""


class PyTritonRuntimeError(PyTritonError):
    """A runtime failure of the server or the proxy."""
