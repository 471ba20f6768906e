"""What a serde is: bytes to objects and back. Errors name the serde; the runtime adds the offset."""

from __future__ import annotations

from typing import Any, Protocol

from millstream.errors import MillstreamError


class SerdeError(MillstreamError):
    """A value could not be converted by its serde."""


class Serde(Protocol):
    """Bytes to a value and back, for a stream's keys or values or a store's. ``to_bytes`` and ``from_bytes``
    raise ``SerdeError`` for a value or bytes they cannot convert, so the runtime can name the message and
    apply the error policies; any other exception fails the container."""

    def to_bytes(self, obj: Any) -> bytes: ...

    def from_bytes(self, data: bytes) -> Any: ...
