"""A container's heartbeat: proof, in the metadata store, that its process runs and reaches the store.

The driver cannot tell a busy container from a silent one by its output: a network partition froze containers
for 45 s with status ``running``, no log line and stale metrics, and Spark noticed a lost host only after its own
timeouts (one to two minutes). So each container records a heartbeat every ``job.container.heartbeat.interval.ms``
from a daemon thread of its own: a long restore or a slow ``process`` call still beats, a frozen process or one cut
off from the store does not. The driver (``millstream.spark.run.liveness``) replaces a running container whose heartbeat
stopped changing for ``job.container.liveness.timeout.ms``.

The driver beats too (:class:`DriverHeartbeat`): a container whose driver went silent for
``job.driver.liveness.timeout.ms`` (:class:`DriverWatch`) commits and stops instead of running headless.

Heartbeats are fenced like every write of the attempt: once a newer attempt started, this one's are refused and
the thread stops, so a replaced container never looks alive again.

Each side counts the other's silence only while its own checks of the store succeed without a gap
(:class:`UnbrokenChecks`): a metadata store that stops answering (a Kafka broker holding the coordinator stream
restarting, a network cut) silences every heartbeat at once, and that is no container's or driver's fault.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Self

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore

log = logging.getLogger(__name__)


class Heartbeat:
    """Beats from a daemon thread of its own until stopped or refused (a newer attempt or run owns the record);
    thread-safe to stop from any thread. ``beat(n)`` records the ``n``-th heartbeat and returns False when it
    was refused (the thread then stops)."""

    def __init__(self, name: str, interval_s: float, beat: Callable[[int], bool]) -> None:
        self._name = name
        self._beat = beat
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"millstream-heartbeat-{name}", daemon=True)
        self.beats = 0

    def start(self) -> Self:
        self._thread.start()
        return self

    @property
    def beating(self) -> bool:
        """False once stopped or fenced."""
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self._interval_s + 5)

    def _run(self) -> None:
        """The first beat at once, then one per interval. A store that fails a beat is logged and tried again at
        the next: missing beats are what the watchers are there to notice."""
        while True:
            try:
                if not self._beat(self.beats + 1):
                    log.warning("%s: heartbeat refused, a newer attempt or run owns it; no more heartbeats", self._name)
                    return
                self.beats += 1
            except Exception as error:  # the store unreachable: this beat is missed, which is the point
                log.warning("%s: heartbeat not recorded: %s", self._name, error)
            if self._stopped.wait(self._interval_s):
                return


class ContainerHeartbeat(Heartbeat):
    """The heartbeat of one container attempt, fenced like its other writes."""

    def __init__(self, store: MetadataStore, container_id: str, generation: int, epoch: int, interval_s: float) -> None:
        super().__init__(
            f"container {container_id} attempt {epoch} of generation {generation}",
            interval_s,
            lambda beat: coordination.record_heartbeat(store, container_id, generation, epoch, beat),
        )


class DriverHeartbeat(Heartbeat):
    """The heartbeat of the driver of one generation, from before its containers start until its run ends:
    :meth:`end` records that the run ended, so neither ``job status`` nor the containers take a finished run
    for one whose driver was lost."""

    def __init__(self, store: MetadataStore, generation: int, interval_s: float) -> None:
        super().__init__(
            f"driver of generation {generation}",
            interval_s,
            lambda beat: coordination.record_driver_heartbeat(store, generation, beat),
        )
        self._store = store
        self._generation = generation

    def end(self) -> None:
        self.stop()
        try:
            coordination.record_driver_heartbeat(self._store, self._generation, self.beats + 1, ended=True)
        except Exception as error:  # a missing "ended" only makes the run look lost later: say so, go on
            log.warning("%s: the end of the run not recorded: %s", self._name, error)


class UnbrokenChecks:
    """Since when an observer's checks of the metadata store have succeeded with no gap longer than ``gap_s``
    between the ends of two of them.

    A watcher counts another party's silence from no earlier than that. A Kafka broker restart makes every read of
    the coordinator stream wait (or fail) and stops every heartbeat at once; when the broker is back each writer
    needs a moment to reconnect. Counted as the writers' silence, a restart longer than the liveness timeout
    replaced every healthy container. A read that waits out the store, or fails, leaves a gap whichever of the
    observer's reads it was. Watchers use half their timeout as ``gap_s``: an outage shorter than that leaves the
    writers the other half to beat again, a longer one gives them a whole timeout from its end, and a check
    delayed as long for another reason (a container's loop inside one long ``process`` call) only delays a
    judgement. The observer's own writes are not the witness: a paused process holding the SQLite store's write
    lock blocks every writer while reads go on, and that process is the one to replace. Sans-IO: the caller says
    when a check succeeded."""

    def __init__(self, gap_s: float) -> None:
        self._gap_s = gap_s
        self._last: float | None = None
        self._since = 0.0

    def succeeded(self, now: float) -> float:
        """A check that read the store ended ``now``: return since when the checks have been unbroken."""
        if self._last is None or now - self._last > self._gap_s:
            self._since = now
        self._last = now
        return self._since


class DriverWatch:
    """A container's view of its driver: lost once the driver's heartbeat for this generation has not changed
    for ``timeout_s`` on the container's own clock (so hosts' clocks never matter), or recorded that its run
    ended while the container still runs. The silence counts only while the container's checks succeed without a
    gap (:class:`UnbrokenChecks`), so a store outage never makes the driver look lost. A generation
    whose driver never beat (a container started by a test or a tool, not a runner) is never judged. Checked at
    most once per ``check_s``."""

    def __init__(
        self,
        store: MetadataStore,
        generation: int,
        timeout_s: float,
        check_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._generation = generation
        self._timeout_s = timeout_s
        self._check_s = check_s
        self._clock = clock
        self._checks = UnbrokenChecks(timeout_s / 2)
        self._last_beat: object = None
        self._changed_at = clock()
        self._checked_at = float("-inf")
        self.lost_reason: str | None = None

    def lost(self) -> bool:
        if self.lost_reason is not None or self._timeout_s <= 0 or self._clock() - self._checked_at < self._check_s:
            return self.lost_reason is not None
        record = coordination.driver_heartbeat(self._store)
        now = self._checked_at = self._clock()  # after the read: one that waited out an outage took time
        checking_since = self._checks.succeeded(now)
        if record is None or record.get("generation") != self._generation:
            return False
        where = f"pid {record.get('pid')} on host {record.get('host')}"
        silent = now - max(self._changed_at, checking_since)
        if record.get("ended"):
            self.lost_reason = f"its driver ({where}) ended the run"
        elif record.get("beat") != self._last_beat:
            self._last_beat, self._changed_at = record.get("beat"), now
        elif silent >= self._timeout_s:
            self.lost_reason = (
                f"its driver ({where}) has not recorded a heartbeat for {silent:.0f}s "
                f"(job.driver.liveness.timeout.ms={self._timeout_s * 1000:.0f})"
            )
        return self.lost_reason is not None


@contextmanager
def driver_heartbeat(config: Settings, generation: int, open_store: Callable[[], MetadataStore]) -> Iterator[None]:
    """The driver beats for ``generation`` while the block runs its containers, and records the run's end after.

    It writes through a metadata-store connection of its own (``open_store`` makes it, the driver's services'
    opener; the heartbeat opens and closes it): a beat waiting for the store's write lock (a
    paused process holding it) must not block the driver's other reads, such as the liveness check that finds that
    process silent and ends it."""
    job = config.job
    store = open_store()
    store.init()
    store.set_writer("the driver's heartbeat")
    heartbeat = DriverHeartbeat(store, generation, job.driver_heartbeat_interval_ms / 1000).start()
    try:
        yield
    finally:
        try:
            heartbeat.end()
        finally:
            store.close()


def driver_watch(config: Settings, store: MetadataStore, generation: int) -> DriverWatch:
    """A container's :class:`DriverWatch` as ``job.driver.liveness.timeout.ms`` sets it."""
    return DriverWatch(store, generation, config.job.driver_liveness_timeout_ms / 1000)
