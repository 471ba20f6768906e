"""What a container measures about itself, built in one place so the container's phases stay readable.

With metrics off (``metrics.*`` not configured) :class:`ContainerMetering` hands out the no-op registry
and no meters at all, so the run loop and the tasks pay one ``is None`` per batch. With metrics on it
owns the container's registry, one :class:`TaskMeters` per task, the series derived from counts the
runtime keeps anyway, the lag refreshed before each snapshot, and the snapshot thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import NOOP_METRICS, Measured, MetricsRegistry, Registry, ScopedRegistry
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.contracts.systems import SystemAdmin
from millstream.metrics.reporters import LogReporter, MetricsReporter, SnapshotHeader, SnapshotLoop, StoreReporter
from millstream.metrics.stream_reporter import SnapshotStreamReporter
from millstream.model import SystemStreamPartition, TaskName

if TYPE_CHECKING:
    from millstream.runtime.services import ContainerServices

log = logging.getLogger(__name__)


class CommitCounts(Protocol):
    """The counts a task's committer keeps anyway (``TaskCommitter``), read at snapshot time."""

    commits: int
    commits_skipped: int
    commits_blocked: int
    commits_timed_out: int
    commit_failures_skipped: int


class MeteredTask(Protocol):
    """The counts a task instance keeps anyway, read at snapshot time."""

    task_name: TaskName
    task: Any
    ssps: frozenset[SystemStreamPartition]
    last_processed: dict[SystemStreamPartition, str]
    end_of_stream: set[SystemStreamPartition]
    processed: int

    @property
    def committer(self) -> CommitCounts: ...


COMMIT_PHASES = ("flush", "snapshot", "upload", "checkpoint", "cleanup")
"""A commit's phases in order: flush producers, snapshot stores, upload, write checkpoints, clean up."""


def ssp_labels(ssp: SystemStreamPartition) -> dict[str, str]:
    return {"system": ssp.system, "stream": ssp.stream, "partition": str(ssp.partition)}


class TaskMeters:
    """The instruments a task instance updates on its hot path, looked up once at start."""

    __slots__ = ("_commit", "_phases", "_process", "_ssps")

    def __init__(self, registry: Registry, task_name: TaskName, ssps: frozenset[SystemStreamPartition]) -> None:
        task = str(task_name)
        self._ssps = {
            ssp: (
                registry.counter("processed", task=task, **ssp_labels(ssp)),
                registry.counter("bytes_read", task=task, **ssp_labels(ssp)),
            )
            for ssp in ssps
        }
        self._process = registry.timer("process", task=task)
        self._commit = registry.timer("commit", task=task)
        self._phases = {phase: registry.timer("commit_phase", task=task, phase=phase) for phase in COMMIT_PHASES}

    def batch(self, ssp: SystemStreamPartition, envelopes: Sequence[Any], seconds: float) -> None:
        """``envelopes`` were processed from ``ssp`` in ``seconds``."""
        processed, read = self._ssps[ssp]
        processed.inc(len(envelopes))
        read.inc(sum(envelope.size for envelope in envelopes))
        self._process.update(seconds)

    def committed(self, seconds: float) -> None:
        """A commit completed ``seconds`` after it started (its asynchronous upload included)."""
        self._commit.update(seconds)

    def commit_phase(self, phase: str, seconds: float) -> None:
        """One phase of a commit took ``seconds``: upload, checkpoint and cleanup on a commit thread when the
        task has backups; flush and snapshot there too when its stores can hold its writes meanwhile, else on the
        task's thread."""
        self._phases[phase].update(seconds)


class ContainerMetering:
    """The container's metrics from start to its last snapshot; inert when metrics are off."""

    def __init__(self, services: ContainerServices, container_id: str, generation: int, attempt: int) -> None:
        self.services = services
        self.config = services.config
        self.settings = self.config.view(MetricsConfig)
        self.header = SnapshotHeader(container_id, generation, attempt)
        self.registry = services.registry
        """The services' registry: None when metrics are off."""
        self._loop: SnapshotLoop | None = None
        self._stream_reporter: SnapshotStreamReporter | None = None
        self._lag = LagGauges()
        if self.registry is not None:
            self.registry.gauge("container_attempt").set(attempt)
            self.registry.gauge("container_generation").set(generation)

    def task_metrics(self, task_name: TaskName) -> MetricsRegistry:
        """What the task sees as ``context.metrics``: its user metrics get the ``user_`` prefix."""
        if self.registry is None:
            return NOOP_METRICS
        return ScopedRegistry(self.registry, {"task": str(task_name)}, prefix="user_")

    def task_meters(self, task_name: TaskName, ssps: frozenset[SystemStreamPartition]) -> TaskMeters | None:
        return None if self.registry is None else TaskMeters(self.registry, task_name, ssps)

    def restarted(self, restarts: int, backoff_seconds: float, store: MetadataStore) -> None:
        """The attempt is restart number ``restarts`` of its container and waits ``backoff_seconds`` first.
        Reported at once when it waits: the snapshot thread only starts once the tasks run, and the delay is
        what an operator looks for while the container is not running."""
        if self.registry is None:
            return
        self.registry.counter("container_restarts").inc(restarts)
        self.registry.gauge("container_restart_backoff_seconds").set(backoff_seconds)
        if backoff_seconds > 0:
            SnapshotLoop(self.registry, self.header, [StoreReporter(store)], 0).report_once("backoff")

    @contextmanager
    def restoring(self) -> Iterator[None]:
        """Time the container's restore, shipping snapshots already while it runs: a long restore's
        progress (``RestoreProgress``) is what an operator waits to see."""
        self._start_reporting()
        started = time.perf_counter()
        yield
        if self.registry is not None:
            self.registry.timer("store_restore").update(time.perf_counter() - started)

    def watch(self, component: Measured) -> None:
        """Read ``component``'s own series at every snapshot from now on (the adjunct loop, from its
        bootstrap: whose progress is what an operator waits to see), shipping snapshots already."""
        if self.registry is None:
            return
        self.registry.before_snapshot(Measurements(self.registry, component).refresh)
        self._start_reporting()

    def start(
        self,
        tasks: Sequence[MeteredTask],
        starts: Mapping[SystemStreamPartition, str],
        counters: Mapping[str, Callable[[], float]],
        consumers: Iterable[object] = (),
    ) -> None:
        """Derive the series the runtime counts anyway (``counters``: the container's own, by name), read
        those that tasks and ``consumers`` keep themselves (``Measured``), then start shipping snapshots."""
        registry = self.registry
        if registry is None:
            return
        for task in tasks:
            _derive_task_series(registry, task)
        for consumer in consumers:
            if isinstance(consumer, Measured):
                registry.before_snapshot(Measurements(registry, consumer).refresh)
        for name, read in counters.items():
            registry.derived(name, "counter", read)
        self._lag = LagGauges(self.services.admin, registry, tasks, starts)
        registry.before_snapshot(self._lag.refresh)
        self._start_reporting()

    def _start_reporting(self) -> None:
        """Start the snapshot thread, once: at the restore when there is one, else when the tasks start."""
        if self.registry is None or self._loop is not None:
            return
        reporters: list[MetricsReporter] = [StoreReporter(self.services.metadata_store("metrics"))]
        if "log" in self.settings.reporters:
            reporters.append(LogReporter())
        if (stream := self.settings.snapshot_stream()) is not None:
            producer = self.services.producers.new_producer(stream.system, start=False)  # under the writer token
            job = self.config.job
            self._stream_reporter = SnapshotStreamReporter(producer, stream, job.name, job.id)
            reporters.append(self._stream_reporter)
        self._loop = SnapshotLoop(self.registry, self.header, reporters, self.settings.snapshot_interval_ms / 1000)
        self._loop.start()

    def close(self, state: str = "stopped") -> None:
        """Stop the snapshot thread after one last snapshot (``state``), and release what it held."""
        loop, self._loop = self._loop, None
        try:
            if loop is not None:
                loop.stop(state)
        finally:
            if self._stream_reporter is not None:
                self._stream_reporter.close()
                self._stream_reporter = None


def _derive_task_series(registry: Registry, task: MeteredTask) -> None:
    name = str(task.task_name)
    committer = task.committer
    registry.derived("commits", "counter", lambda: committer.commits, task=name)
    registry.derived("commits_skipped", "counter", lambda: committer.commits_skipped, task=name)
    registry.derived("commits_blocked", "counter", lambda: committer.commits_blocked, task=name)
    registry.derived("commits_timed_out", "counter", lambda: committer.commits_timed_out, task=name)
    registry.derived("commit_failures_skipped", "counter", lambda: committer.commit_failures_skipped, task=name)
    for ssp in task.ssps:
        registry.derived("input_end_of_stream", "gauge", partial(_ended, task, ssp), task=name, **ssp_labels(ssp))
    if isinstance(task.task, Measured):
        registry.before_snapshot(Measurements(registry, task.task, {"task": name}).refresh)


def _ended(task: MeteredTask, ssp: SystemStreamPartition) -> float:
    return float(ssp in task.end_of_stream)


class Measurements:
    """Copies a component's own series (``Measured``: a task, a consumer) into the registry before each
    snapshot, adding ``labels`` (its task); a counter is mirrored, being counted by the component."""

    def __init__(self, registry: Registry, component: Measured, labels: Mapping[str, str] | None = None) -> None:
        self.registry = registry
        self.component = component
        self.labels = dict(labels or {})

    def refresh(self) -> None:
        try:
            measured = list(self.component.measurements())
        except Exception as error:  # read while its own thread changes it: the series keep their last values
            log.debug("metrics: %s skipped: %s: %s", type(self.component).__name__, type(error).__name__, error)
            return
        for name, kind, labels, value in measured:
            merged = {**labels, **self.labels}
            if kind == "counter":
                self.registry.counter(name, **merged).value = value
            else:
                self.registry.gauge(name, **merged).set(value)


class LagGauges:
    """Consumer lag per partition: upcoming offset - next offset to process, refreshed before each snapshot
    on the snapshot thread from the container's shared admins (``admin``: thread-safe). Systems whose offsets
    are not numbers (Kinesis sequence numbers) have no lag gauge."""

    def __init__(
        self,
        admin: Callable[[str], SystemAdmin] | None = None,
        registry: Registry | None = None,
        tasks: Sequence[MeteredTask] = (),
        starts: Mapping[SystemStreamPartition, str] | None = None,
    ) -> None:
        self.admin = admin
        self.registry = registry
        self.tasks = list(tasks)
        self.starts = dict(starts or {})
        self.unmeasurable: set[str] = set()

    def refresh(self) -> None:
        try:
            self._refresh()
        except Exception as error:  # the system is unreachable for now: the gauges keep their last value
            log.warning("metrics: consumer lag not refreshed: %s: %s", type(error).__name__, error)

    def _refresh(self) -> None:
        if self.registry is None or self.admin is None:
            return
        ssps = {ssp for task in self.tasks for ssp in task.ssps if ssp.system not in self.unmeasurable}
        metadata: dict[SystemStreamPartition, Any] = {}
        for system in sorted({ssp.system for ssp in ssps}):
            metadata.update(self.admin(system).get_ssp_metadata(s for s in ssps if s.system == system))
        for task in self.tasks:
            processed = task.last_processed.copy()
            for ssp in task.ssps:
                info = metadata.get(ssp)
                if info is None:
                    continue
                lag = _lag(info.upcoming_offset, processed.get(ssp), self.starts.get(ssp))
                if lag is None:
                    self.unmeasurable.add(ssp.system)
                    continue
                self.registry.gauge("lag", task=str(task.task_name), **ssp_labels(ssp)).set(lag)


def _lag(upcoming: str | None, last_processed: str | None, start: str | None) -> int | None:
    """Messages not yet processed; None when the offsets are not numbers."""
    try:
        if upcoming is None:
            return None
        next_offset = int(last_processed) + 1 if last_processed is not None else int(start) if start else 0
        return max(0, int(upcoming) - next_offset)
    except ValueError:
        return None
