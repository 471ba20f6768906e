"""Testing only: pause a commit at a named point so a test can SIGKILL the container exactly there.

``task.commit.testing.pause.at`` names the point (``before-snapshot``, after the producers' flush;
``after-snapshot``, ``mid-upload``, ``after-upload``, ``after-checkpoint``), ``task.commit.testing.pause.ms``
how long to pause, and ``task.commit.testing.marker.dir`` where the pause announces itself: it writes
``<point>`` holding the pausing process id, then sleeps. The marker also makes the pause happen once per
job: a restarted container that finds it does not pause again. Off (and free) unless configured.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from millstream.config.settings import Settings
from millstream.files import claim_marker

log = logging.getLogger(__name__)

PAUSE_POINTS = ("before-snapshot", "after-snapshot", "mid-upload", "after-upload", "after-checkpoint")


class CommitPauses:
    def __init__(self, point: str | None, pause_ms: int, marker_dir: str | None) -> None:
        if point is not None and point not in PAUSE_POINTS:
            from millstream.errors import ConfigError

            raise ConfigError(
                f"config key 'task.commit.testing.pause.at': '{point}' is not one of {', '.join(PAUSE_POINTS)}"
            )
        self.point = point
        self.pause_ms = pause_ms
        self.marker_dir = Path(marker_dir) if marker_dir else None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, config: Settings) -> CommitPauses:
        task = config.task
        return cls(task.commit_testing_pause_at, task.commit_testing_pause_ms, task.commit_testing_marker_dir)

    def __call__(self, point: str) -> None:
        if point != self.point:
            return
        with self._lock:
            if self.marker_dir is not None and not claim_marker(self.marker_dir / point):
                return
            log.warning("testing: commit paused at %s for %d ms (pid %d)", point, self.pause_ms, os.getpid())
            time.sleep(self.pause_ms / 1000)
