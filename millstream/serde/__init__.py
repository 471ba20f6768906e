"""Serdes: turning stream bytes into objects and back."""

from millstream.serde.base import Serde, SerdeError
from millstream.serde.registry import SerdeRegistry

__all__ = ["Serde", "SerdeError", "SerdeRegistry"]
