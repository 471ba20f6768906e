"""Draining a running job: each container notices the request and stops reading its source partitions.

``millstream job drain`` writes a drain request for the job's run to the metadata store (Samza's drain
notification); every container polls for it at ``job.drain.poll.interval.ms`` (Samza's ``DrainMonitor``).
Once it is there, the container stops reading the partitions of its tasks that are not intermediate
streams and reports each to its task as drained (``TaskInstance.mark_drained``). A low-level task then
gets ``on_drain``, commits and finishes; the high-level engine finishes its inputs as drained and passes
drain messages through the intermediate streams, whose partitions the consuming tasks declare drained in
turn. The container returns once all its tasks finished, with the outcome ``drained``.

Intermediate partitions are not drained here: what is in them was produced before the upstream tasks'
drain messages and must still be processed, which the in-band messages guarantee.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from millstream.config.settings import Settings
from millstream.config.views import StreamSamzaConfig
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.model import SystemStreamPartition
from millstream.runtime.task_instance import TaskInstance

log = logging.getLogger(__name__)


class DrainMonitor:
    """Polls for a drain request of one run and, once, drains the source partitions of the tasks."""

    def __init__(
        self,
        requested: Callable[[], bool],
        tasks: Iterable[TaskInstance],
        sources: frozenset[SystemStreamPartition],
        interval_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requested = requested
        self.tasks = list(tasks)
        self.sources = sources
        """The container's partitions that are not intermediate streams: those a drain stops reading."""
        self.interval = interval_ms / 1000
        self.clock = clock
        self.next_check = clock()
        self.draining = False

    @classmethod
    def of(
        cls, config: Settings, store: MetadataStore, run_id: str, tasks: Iterable[TaskInstance], interval_ms: int
    ) -> DrainMonitor:
        tasks = list(tasks)
        ssps = {ssp for task in tasks for ssp in task.ssps}
        sources = frozenset(ssp for ssp in ssps if not config.view(StreamSamzaConfig, ssp.system_stream).intermediate)
        return cls(lambda: coordination.drain_requested(store, run_id), tasks, sources, interval_ms)

    def poll(self, pending: dict[SystemStreamPartition, Any]) -> bool:
        """When due, look for the request; on the first one, drain. True when this call drained.

        ``pending`` holds what the run loop polled but has not delivered yet: a drained partition's is
        dropped, never processed (its offsets stay uncommitted, so the next run reads it).
        """
        now = self.clock()
        if self.draining or now < self.next_check:
            return False
        self.next_check = now + self.interval
        if not self.requested():
            return False
        self.draining = True
        log.info("drain requested: no longer reading %d source partition(s)", len(self.sources))
        for ssp in self.sources:
            pending.pop(ssp, None)
        for task in self.tasks:
            for ssp in sorted(task.ssps & self.sources):
                task.mark_drained(ssp)
        return True
