"""The consumers of a container behind one ``poll``: used by the run loop and by the adjunct loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from millstream.contracts.systems import SystemConsumer
from millstream.model import SystemStreamPartition


class SystemConsumers:
    """All consumers of a container behind one ``poll`` over the partitions still being read."""

    def __init__(self, consumers: Mapping[str, SystemConsumer]) -> None:
        self.consumers = dict(consumers)

    def start(self) -> None:
        for consumer in self.consumers.values():
            consumer.start()

    def poll(self, active: set[SystemStreamPartition], timeout: float) -> dict[SystemStreamPartition, list[Any]]:
        wanted: dict[str, set[SystemStreamPartition]] = {}
        for ssp in active:
            wanted.setdefault(ssp.system, set()).add(ssp)
        if len(wanted) == 1:
            ((system, ssps),) = wanted.items()
            return self.consumers[system].poll(ssps, timeout)
        result: dict[SystemStreamPartition, list[Any]] = {}
        for wait in (0.0, timeout / max(len(wanted), 1)):
            for system, ssps in wanted.items():
                result.update(self.consumers[system].poll(ssps, wait))
            if result:
                break
        return result

    def stop(self) -> None:
        for consumer in self.consumers.values():
            consumer.stop()
