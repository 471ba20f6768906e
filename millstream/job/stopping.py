"""Stopping a job that runs elsewhere: the graceful stop of a SIGTERM, written to the job's metadata store.

In YARN cluster mode the driver runs in the application master's container, where no signal of the operator
reaches it; the runner's own stop signal in the metadata store does: the containers commit and stop, the driver
returns ``stopped``. It works for any deployment whose metadata store this machine reaches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.drain import ACTIVE_STATES
from millstream.errors import MillstreamError

POLL_S = 0.5
"""How often ``wait_until_stopped`` reads the containers' states."""


class StopRefusedError(MillstreamError):
    """The job is not running: nothing was written."""

    exit_code = 2


@dataclass(frozen=True)
class StopRequest:
    generation: int
    containers: tuple[str, ...]
    """The containers of the generation that were active when the stop signal was written."""


def request_stop(config: Settings, store: MetadataStore) -> StopRequest:
    """Write the stop signal for the job's current generation to ``store`` (the driver services' connection);
    ``StopRefusedError`` when none is active."""
    generation = coordination.current_generation(store)
    active = _active(store, generation)
    if generation == 0 or not active:
        raise StopRefusedError(
            f"job '{config.job.name}' is not running (generation {generation}: no container is "
            "starting or running); nothing to stop"
        )
    coordination.request_stop(store, generation)
    return StopRequest(generation, tuple(active))


def wait_until_stopped(store: MetadataStore, generation: int, timeout_s: float) -> bool:
    """Whether every container of ``generation`` left the active states within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while _active(store, generation):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _active(store: MetadataStore, generation: int) -> list[str]:
    statuses = coordination.container_statuses(store)
    active = [
        cid
        for cid, status in statuses.items()
        if status.get("generation") == generation and status.get("state") in ACTIVE_STATES
    ]
    return sorted(active, key=int)
