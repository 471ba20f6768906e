"""The line ``millstream run`` keeps up to date while the job runs: messages processed, rate, elapsed time.

When every input partition is sealed (a bounded input) the total is known before the job starts — what
lies between each partition's checkpoint and its end — and the line is a progress bar of the input
positions the tasks moved through of that total, so a restarted container never makes it look like lost
data; a finished job's last figure is read from its checkpoints. Otherwise it counts messages processed.
Both come from the containers' metrics snapshots when metrics are on (every ``metrics.snapshot.interval.ms``),
else from their checkpoints (every commit); the rate moves only with the figure
(:mod:`millstream.cli.progress_readings`). A container restart prints one line with its cause.

It draws on stderr; on a terminal rich keeps it below any log line, elsewhere (a pipe, a file) only the
final line is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from millstream.cli.progress_readings import ProcessedCount, Rate, RestartWatch, moved_positions
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.contracts.metrics_snapshot import ContainerSnapshot, current_snapshots
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.services import DriverServices
from millstream.coordinator.status import PartitionLag, partition_lags
from millstream.errors import MillstreamError
from millstream.job_model import JobModel
from millstream.model import SystemStreamPartition

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.5
_CHECKPOINT_POLL_SECONDS = 2.0


def _next_offsets(lags: list[PartitionLag]) -> dict[SystemStreamPartition, int]:
    """Per partition with numeric offsets, the next offset its task reads when the run starts."""
    starts = {}
    for lag in lags:
        try:
            if lag.checkpointed is not None:
                starts[lag.ssp] = int(lag.checkpointed) + 1
            elif lag.upcoming is not None and lag.lag is not None:
                starts[lag.ssp] = int(lag.upcoming) - lag.lag
        except ValueError:
            continue
    return starts


class RunProgress:
    """Polls the metadata store on a thread of its own and redraws the line; :meth:`finish` ends it. It reads
    through the driver's ``services``, which give its thread an admin per system and a connection of its own."""

    def __init__(self, config: Settings, model: JobModel, console: Console, services: DriverServices) -> None:
        self.config = config
        self.model = model
        self._services = services
        lags = partition_lags(config, model, services)
        bounded = bool(lags) and all(lag.sealed for lag in lags)
        self.total = sum(lag.lag or 0 for lag in lags) if bounded else None
        self._starts = _next_offsets(lags)
        self._start_lags = {lag.ssp: lag.lag for lag in lags if lag.lag is not None}
        self._console = console
        self._processed = ProcessedCount()
        self._restarts = RestartWatch()
        self._snapshot_rate = Rate(stale_after=3 * config.view(MetricsConfig).snapshot_interval_ms / 1000)
        self._checkpoint_rate = Rate(stale_after=3 * max(config.task.commit_ms / 1000, _CHECKPOINT_POLL_SECONDS))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="millstream-progress", daemon=True)
        counted: tuple[ProgressColumn, ...] = (
            (BarColumn(), MofNCompleteColumn()) if bounded else (TextColumn("{task.completed:.0f}"),)
        )
        self._progress = Progress(
            TextColumn("{task.description}"),
            *counted,
            TextColumn("messages  {task.fields[rate]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        name = config.job.name
        self._task: TaskID = self._progress.add_task(f"job {name}", total=self.total, rate="")

    def start(self) -> RunProgress:
        self._progress.start()
        self._thread.start()
        return self

    def update(self, processed: float, per_second: float | None) -> None:
        rate = "" if per_second is None else f"{per_second:,.0f} msg/s"
        self._progress.update(self._task, completed=processed, rate=rate)

    def finish(self, result: JobResult | None) -> None:
        """Stop polling; the last line shows what the containers report they processed. Without a result
        (the run raised: its error is the message that matters) the line goes away. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        if result is not None:
            self._say_restarts()  # a restart after the last poll (a short run) is still said
            if self.total is not None:  # positions: what the checkpoints say the tasks got through
                processed = float(self._checkpointed())
            else:
                processed = max(self._processed.total, sum(container.messages for container in result.containers))
            self._progress.update(self._task, completed=processed, rate=result.outcome)
        else:
            self._progress.live.transient = True
        self._progress.stop()

    def _say_restarts(self) -> None:
        """One line above the bar per container restart the status records show and no line said yet."""
        try:
            statuses = coordination.container_statuses(self._services.store())
        except MillstreamError as error:  # informational, as the rest of the line
            log.warning("progress line: cannot read the containers' status: %s", error)
            return
        for line in self._restarts.lines(statuses):
            self._console.print(line, highlight=False)

    def _poll(self) -> None:
        try:
            self._follow()
        except Exception as error:  # the line is informational: the job goes on, the final figure still comes
            log.warning("progress line stopped following the job: %s: %s", type(error).__name__, error)

    def _follow(self) -> None:
        store = self._services.store()
        first = coordination.current_generation(store)
        checked = 0.0
        while not self._stop.wait(_POLL_SECONDS):
            self._say_restarts()
            generation = coordination.current_generation(store)
            if generation <= first and first > 0:
                continue  # the job has not published its generation yet: earlier snapshots are stale
            snapshots = current_snapshots(store, generation)
            if snapshots:
                self._from_snapshots(snapshots)
            elif time.monotonic() - checked >= _CHECKPOINT_POLL_SECONDS:
                checked = time.monotonic()
                processed = self._checkpointed()
                self.update(processed, self._checkpoint_rate.reading(checked, processed))

    def _from_snapshots(self, snapshots: list[ContainerSnapshot]) -> None:
        samples = [sample for snapshot in snapshots for sample in snapshot.samples]
        processed = self._processed.add(samples)
        if self.total is not None:
            processed = min(self.total, moved_positions(self._start_lags, samples))
        written = max(snapshot.written_ms for snapshot in snapshots) / 1000
        self.update(processed, self._snapshot_rate.reading(written, processed))

    def _checkpointed(self) -> float:
        processed = 0
        for lag in partition_lags(self.config, self.model, self._services):
            start = self._starts.get(lag.ssp)
            try:
                if start is not None and lag.checkpointed is not None:
                    processed += max(0, int(lag.checkpointed) + 1 - start)
            except ValueError:
                continue
        return processed


@contextmanager
def run_progress(
    config: Settings, model: JobModel | None, console: Console, quiet: bool, services: DriverServices
) -> Iterator[RunProgress | None]:
    """The progress line while the block runs (None with ``quiet``); the block calls ``finish`` with
    the result, and the line is closed either way."""
    if quiet or model is None:
        yield None
        return
    progress = RunProgress(config, model, console, services).start()
    try:
        yield progress
    finally:
        progress.finish(None)
