"""Typed errors of the agentbox SDK.

Every error the daemon answers carries a stable code (``not_found``,
``invalid_argument``, ...) and a message that says what was wrong and what
to do. The SDK raises the class that matches the code; each instance keeps
the ``code``, the ``message`` and the HTTP ``status`` it came with::

    from agentbox.errors import NotFoundError
    try:
        sbx.files.read("/nope")
    except NotFoundError as e:
        print(e.code, e.message)   # not_found /nope: no such file or directory

``TimeoutError`` also derives from Python's built-in ``TimeoutError`` and
``UnavailableError`` from ``ConnectionError``, so generic handlers catch them.
"""

from __future__ import annotations

import builtins
from typing import Dict, Optional, Type

__all__ = [
    "AgentboxError",
    "NotFoundError",
    "InvalidArgumentError",
    "UnauthorizedError",
    "PermissionDeniedError",
    "TimeoutError",
    "ConflictError",
    "ResourceExhaustedError",
    "UnavailableError",
    "InternalError",
    "NotSupportedError",
    "error_from_code",
]


class AgentboxError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        code: the API's stable error code, e.g. ``"not_found"``.
        message: the daemon's message, meant for people.
        status: the HTTP status of the answer, or None when the error did
            not come from an HTTP answer.
    """

    default_code = "internal"

    def __init__(self, message: str, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class NotFoundError(AgentboxError):
    """The sandbox, file, template, process or route does not exist (``not_found``)."""

    default_code = "not_found"


class InvalidArgumentError(AgentboxError, ValueError):
    """A request was malformed or a value out of range (``invalid_argument``)."""

    default_code = "invalid_argument"


class UnauthorizedError(AgentboxError):
    """The API key is missing or wrong (``unauthenticated``)."""

    default_code = "unauthenticated"


class PermissionDeniedError(AgentboxError, PermissionError):
    """The key may not do this (``permission_denied``), e.g. an admin-only route."""

    default_code = "permission_denied"


class TimeoutError(AgentboxError, builtins.TimeoutError):  # noqa: A001 - the contract's name
    """A deadline passed (``deadline_exceeded``): the daemon gave up, a request
    took longer than the client's timeout, or a process did not end within
    ``Process.wait(timeout=...)``. A command run by ``exec(timeout=...)``
    that runs too long is killed and is *not* an error: its result has
    ``timed_out=True``."""

    default_code = "deadline_exceeded"


class ConflictError(AgentboxError):
    """The thing is in the wrong state for this, or already exists
    (``failed_precondition``, ``already_exists``)."""

    default_code = "failed_precondition"


class ResourceExhaustedError(AgentboxError):
    """A quota or limit was reached (``resource_exhausted``)."""

    default_code = "resource_exhausted"


class UnavailableError(AgentboxError, ConnectionError):
    """The daemon or the sandbox cannot be reached right now (``unavailable``)."""

    default_code = "unavailable"


class InternalError(AgentboxError):
    """The daemon failed in a way it did not expect (``internal``)."""

    default_code = "internal"


class NotSupportedError(AgentboxError, NotImplementedError):
    """The capability has not landed in agentbox yet (``unimplemented``)."""

    default_code = "unimplemented"


_BY_CODE: Dict[str, Type[AgentboxError]] = {
    "not_found": NotFoundError,
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": UnauthorizedError,
    "permission_denied": PermissionDeniedError,
    "deadline_exceeded": TimeoutError,
    "failed_precondition": ConflictError,
    "already_exists": ConflictError,
    "resource_exhausted": ResourceExhaustedError,
    "unavailable": UnavailableError,
    "node_unavailable": UnavailableError,
    "internal": InternalError,
    "unimplemented": NotSupportedError,
}

_BY_STATUS: Dict[int, str] = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "failed_precondition",
    413: "invalid_argument",
    422: "invalid_argument",
    429: "resource_exhausted",
    502: "unavailable",
    503: "unavailable",
    504: "deadline_exceeded",
}


def error_from_code(code: str, message: str, status: Optional[int] = None) -> AgentboxError:
    """Return the typed error for an API error code (unknown codes: InternalError)."""
    cls = _BY_CODE.get(code, InternalError)
    return cls(message, code=code, status=status)


def error_from_status(status: int, message: str) -> AgentboxError:
    """Class an answer that carries no API error body by its HTTP status."""
    return error_from_code(_BY_STATUS.get(status, "internal"), message, status)
