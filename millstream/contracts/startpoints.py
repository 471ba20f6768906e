"""Startpoints: where a partition should start, given out of band and taking precedence over checkpoints.

A startpoint is a *position type* plus its value, never a raw system offset string (except
``StartpointSpecific``), so one tool can move any system's job. Each carries its creation time: the
newer of two competing startpoints wins, and an old one is ignored as stale.

Systems resolve startpoints to offsets with ``SystemAdmin.resolve_startpoint`` (a visitor over the
types below); ``StartpointCustom`` subclasses registered by type name extend the set for one system.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from millstream.model import SystemStreamPartition

R = TypeVar("R", covariant=True)


def now_ms() -> int:
    return int(time.time() * 1000)


class StartpointVisitor(Protocol[R]):
    """What a system implements to turn each startpoint type into an offset (or anything else)."""

    def visit_specific(self, ssp: SystemStreamPartition, startpoint: StartpointSpecific) -> R: ...

    def visit_timestamp(self, ssp: SystemStreamPartition, startpoint: StartpointTimestamp) -> R: ...

    def visit_oldest(self, ssp: SystemStreamPartition, startpoint: StartpointOldest) -> R: ...

    def visit_upcoming(self, ssp: SystemStreamPartition, startpoint: StartpointUpcoming) -> R: ...

    def visit_custom(self, ssp: SystemStreamPartition, startpoint: StartpointCustom) -> R: ...


@dataclass(frozen=True)
class Startpoint(ABC):
    """Base of all startpoints; ``creation_timestamp`` (epoch ms) is part of equality, as in Samza."""

    creation_timestamp: int = field(default_factory=now_ms, kw_only=True)

    @abstractmethod
    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        """Double dispatch: call the visitor method for this type."""

    def describe(self) -> str:
        return type(self).__name__.removeprefix("Startpoint").lower()


@dataclass(frozen=True)
class StartpointSpecific(Startpoint):
    """Start at this exact offset (inclusive), in the system's own offset format."""

    specific_offset: str

    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        return visitor.visit_specific(ssp, self)

    def describe(self) -> str:
        return f"offset {self.specific_offset}"


@dataclass(frozen=True)
class StartpointTimestamp(Startpoint):
    """Start at the first record whose timestamp is at or after this epoch-ms instant."""

    timestamp_offset: int

    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        return visitor.visit_timestamp(ssp, self)

    def describe(self) -> str:
        return f"timestamp {self.timestamp_offset}"


@dataclass(frozen=True)
class StartpointOldest(Startpoint):
    """Start at the oldest retained record."""

    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        return visitor.visit_oldest(ssp, self)


@dataclass(frozen=True)
class StartpointUpcoming(Startpoint):
    """Start after the newest record: only what is written from now on."""

    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        return visitor.visit_upcoming(ssp, self)


@dataclass(frozen=True)
class StartpointCustom(Startpoint):
    """Base for a system's own startpoint types; subclass, add fields, and ``register_startpoint_type``.

    Its JSON form is its dataclass fields (besides the creation timestamp) under their names.
    """

    type_name: ClassVar[str] = ""

    def apply(self, ssp: SystemStreamPartition, visitor: StartpointVisitor[Any]) -> Any:
        return visitor.visit_custom(ssp, self)


GENERIC_TYPES: dict[str, type[Startpoint]] = {
    "StartpointSpecific": StartpointSpecific,
    "StartpointTimestamp": StartpointTimestamp,
    "StartpointOldest": StartpointOldest,
    "StartpointUpcoming": StartpointUpcoming,
}

_CUSTOM_TYPES: dict[str, type[StartpointCustom]] = {}


def register_startpoint_type(cls: type[StartpointCustom]) -> type[StartpointCustom]:
    """Make a custom startpoint readable from the metadata store by its type name (class decorator)."""
    name = cls.type_name or cls.__name__
    if name in GENERIC_TYPES:
        raise ValueError(f"'{name}' is a generic startpoint type and cannot be redefined")
    _CUSTOM_TYPES[name] = cls
    return cls


def startpoint_type(name: str) -> type[Startpoint] | None:
    return GENERIC_TYPES.get(name) or _CUSTOM_TYPES.get(name)


def type_name(startpoint: Startpoint) -> str:
    if isinstance(startpoint, StartpointCustom):
        return type(startpoint).type_name or type(startpoint).__name__
    return type(startpoint).__name__
