"""What a serde is: bytes to objects and back. Errors name the serde; the runtime adds the offset."""

from __future__ import annotations

from typing import Any, Protocol

from millstream.errors import MillstreamError


class SerdeError(MillstreamError):
    """A value could not be converted by its serde."""


class Serde(Protocol):
    def to_bytes(self, obj: Any) -> bytes: ...

    def from_bytes(self, data: bytes) -> Any: ...
