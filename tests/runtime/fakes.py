"""Test doubles for what a task instance takes and the tests do not look at."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from millstream.model import OutgoingMessageEnvelope, SystemStream


class DiscardingCollector:
    """A collector for tasks whose output the test does not read."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        pass

    def send_batch(self, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None = None) -> None:
        pass


class Clock:
    """A hand-moved clock (seconds, as ``time.monotonic``) for code that takes its time as an input."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000
