"""Test doubles for what a task instance takes and the tests do not look at."""

from __future__ import annotations

from millstream.model import OutgoingMessageEnvelope


class DiscardingCollector:
    """A collector for tasks whose output the test does not read."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        pass
