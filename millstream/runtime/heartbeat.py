"""A container's heartbeat: proof, in the metadata store, that its process runs and reaches the store.

The driver cannot tell a busy container from a silent one by its output: a network partition froze containers
for 45 s with status ``running``, no log line and stale metrics, and Spark noticed a lost host only after its own
timeouts (one to two minutes). So each container records a heartbeat every ``job.container.heartbeat.interval.ms``
from a daemon thread of its own: a long restore or a slow ``process`` call still beats, a frozen process or one cut
off from the store does not. The driver (``millstream.spark.liveness``) replaces a running container whose heartbeat
stopped changing for ``job.container.liveness.timeout.ms``.

Heartbeats are fenced like every write of the attempt: once a newer attempt started, this one's are refused and
the thread stops, so a replaced container never looks alive again.
"""

from __future__ import annotations

import logging
import threading

from millstream.metadata import coordination
from millstream.metadata.base import MetadataStore

log = logging.getLogger(__name__)


class ContainerHeartbeat:
    """Beats for one container attempt until stopped or fenced; thread-safe to stop from any thread."""

    def __init__(self, store: MetadataStore, container_id: str, generation: int, epoch: int, interval_s: float) -> None:
        self._store = store
        self._container_id = container_id
        self._generation = generation
        self._epoch = epoch
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"millstream-heartbeat-{container_id}", daemon=True)
        self.beats = 0

    def start(self) -> ContainerHeartbeat:
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
        the next: missing beats are what the driver is there to notice."""
        while True:
            try:
                if not coordination.record_heartbeat(
                    self._store, self._container_id, self._generation, self._epoch, self.beats + 1
                ):
                    log.warning(
                        "container %s attempt %s of generation %s: heartbeat refused, a newer attempt owns the "
                        "container; no more heartbeats", self._container_id, self._epoch, self._generation,
                    )  # fmt: skip
                    return
                self.beats += 1
            except Exception as error:  # the store unreachable: this beat is missed, which is the point
                log.warning("container %s: heartbeat not recorded: %s", self._container_id, error)
            if self._stopped.wait(self._interval_s):
                return
