"""The driver's liveness check: a running container whose heartbeat stopped is replaced within seconds.

Spark notices a lost host only after its own timeouts (``spark.network.timeout``, 120 s; the executor heartbeat
and, on standalone, ``spark.worker.timeout``, 60 s), and a network partition that cuts a container off from the
metadata store and the brokers while its executor still answers is never noticed: the container stays
``running`` with no log line and stale metrics. Each container therefore records a heartbeat in the metadata
store (``millstream.runtime.heartbeat``); the driver polls them and, when a container whose Spark task runs has
not changed its heartbeat for ``job.container.liveness.timeout.ms`` (measured on the driver's clock, so hosts'
clocks never matter), replaces it:

1. it kills the container's Spark task attempt; Spark starts the next attempt (a kill by the driver does not
   count against ``spark.task.maxFailures``), whose start fences the silent one: its writes, status reports
   and heartbeats are refused from then on;
2. if the task is still running one more timeout later (its executor is unreachable, so the kill never arrived),
   the executor is declared lost, as Spark's own heartbeat timeout would do much later: its tasks are
   started elsewhere at once and Spark asks the cluster manager to replace it. Local mode has no executor to
   lose; there the kill always arrives.

A container's silence counts only while the driver's checks of the store succeed without a gap
(:class:`~millstream.runtime.heartbeat.UnbrokenChecks`): a Kafka broker holding the coordinator stream that
restarts silences every heartbeat at once, and replacing every container for it would turn a stall into a
restart of the whole job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.runtime.heartbeat import UnbrokenChecks
from millstream.spark.run.running_tasks import RunningTask, running_tasks
from millstream.spark.run.session import local_slots

log = logging.getLogger(__name__)

_ENDED = frozenset({"finished", "stopped", "drained", "superseded", "failed"})


@dataclass
class _Seen:
    beat: tuple[int, int]
    """The heartbeat's (attempt, beat): it changes at every beat of a live container."""
    since: float
    """When the driver first saw it (monotonic seconds)."""
    killed_at: float | None = None
    killed_task: int | None = None
    """The Spark task attempt the driver killed: while another one runs, the container is starting again."""


class LivenessMonitor:
    """Polled by the driver's loop; replaces silent containers of one job group. Never fails the job: a check
    that cannot read Spark's status store or the metadata store tries again at the next poll."""

    def __init__(
        self,
        sc: SparkContext,
        store: MetadataStore,
        group: str,
        config: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sc = sc
        self._store = store
        self._group = group
        self._timeout_s = config.job.container_liveness_timeout_ms / 1000
        self._checks = UnbrokenChecks(self._timeout_s / 2)
        self._clock = clock
        self._local = local_slots(str(sc.master)) is not None
        self._seen: dict[str, _Seen] = {}
        self.replaced: list[str] = []
        """Containers replaced so far, in order (one entry per silent attempt)."""

    def poll(self, generation: int) -> None:
        if self._timeout_s <= 0:
            return
        try:
            self._check(generation)
        except Exception as error:  # advisory: the next poll tries again
            log.debug("liveness check failed: %s", error)

    def _check(self, generation: int) -> None:
        beats = coordination.container_heartbeats(self._store)
        statuses = coordination.container_statuses(self._store)
        now = self._clock()  # after the reads: one that waited out an outage took time
        checking_since = self._checks.succeeded(now)
        running: dict[int, RunningTask] | None = None
        for container_id, beat in beats.items():
            if beat.get("generation") != generation or statuses.get(container_id, {}).get("state") in _ENDED:
                continue
            key = (int(beat.get("attempt", 0)), int(beat.get("beat", 0)))
            seen = self._seen.get(container_id)
            if seen is None or seen.beat != key:
                self._seen[container_id] = _Seen(key, now)
                continue
            silent = now - max(seen.since, checking_since)
            if silent < self._timeout_s or (seen.killed_at is not None and now - seen.killed_at < self._timeout_s):
                continue
            running = running_tasks(self._sc, self._group) if running is None else running
            task = running.get(int(container_id)) if container_id.isdigit() else None
            if task is None:
                continue
            if seen.killed_task is not None and task.task_id != seen.killed_task:
                self._seen[container_id] = _Seen(key, now)  # the next attempt's task: a timeout to send a first beat
                continue
            self._replace(container_id, key[0], task, seen, silent, now)

    def _replace(
        self, container_id: str, attempt: int, task: RunningTask, seen: _Seen, silent: float, now: float
    ) -> None:
        where = f"container {container_id} (attempt {attempt}, executor {task.executor_id} on {task.host})"
        if seen.killed_at is None:
            log.warning(
                "%s sent no heartbeat for %.1fs (job.container.liveness.timeout.ms=%d): killing its Spark task %d; "
                "its next attempt fences it",
                where, silent, int(self._timeout_s * 1000), task.task_id,
            )  # fmt: skip
            reason = f"millstream: container {container_id} silent for {silent:.1f}s"
            self._sc._jsc.sc().killTaskAttempt(task.task_id, True, reason)
            self.replaced.append(container_id)
            seen.killed_task = task.task_id
        elif not self._local:
            log.warning(
                "%s is still running %.1fs after its task was killed: its executor is unreachable; declaring "
                "executor %s lost so its tasks start elsewhere now",
                where, now - seen.killed_at, task.executor_id,
            )  # fmt: skip
            self._lose_executor(task.executor_id, f"millstream: container {container_id} silent for {silent:.1f}s")
        seen.killed_at = now

    def _lose_executor(self, executor_id: str, reason: str) -> None:
        """What Spark's own heartbeat timeout does (``HeartbeatReceiver``): the executor's tasks are rescheduled
        at once and the cluster manager is asked for a replacement."""
        jvm: Any = self._sc._jvm
        context: Any = self._sc._jsc.sc()
        lost = jvm.org.apache.spark.scheduler.ExecutorProcessLost(reason, jvm.scala.Option.apply(None), False)
        context.taskScheduler().executorLost(executor_id, lost)
        context.killAndReplaceExecutor(executor_id)
