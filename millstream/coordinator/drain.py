"""What ``millstream job drain`` does: find the job's running run and ask its containers to drain.

The request is a record in the job's metadata store (``metadata.coordination.request_drain``) that every
container of the run polls for; the containers stop reading their inputs, the in-band drain messages
empty the intermediate streams, windows fire, tasks commit and the job exits 0 with the outcome
``drained``. The run is the one the running containers reported (their status carries its id), so the
command needs no more of the config than where the metadata store is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.services import DriverServices, driver_services
from millstream.coordinator.status import current_driver
from millstream.errors import MillstreamError

ACTIVE_STATES = frozenset({"starting", "restoring", "bootstrapping", "running"})
"""Container states of a job that is running (``Container._report``)."""


class DrainRefusedError(MillstreamError):
    """The job is not running, or not as the run the request names; nothing was written."""


@dataclass(frozen=True)
class DrainRequest:
    run_id: str
    generation: int
    containers: tuple[str, ...]
    """The containers of the run that were active when the request was written."""


def request_drain(config: Settings, run_id: str | None = None, services: DriverServices | None = None) -> DrainRequest:
    """Write a drain request for the running run of the job (``run_id``, when given, must be that run)."""
    with driver_services(config, services) as own:
        store = own.store()
        generation = coordination.current_generation(store)
        active = {
            container_id: status
            for container_id, status in coordination.container_statuses(store).items()
            if status.get("generation") == generation and status.get("state") in ACTIVE_STATES
        }
        if generation == 0 or not active:
            raise DrainRefusedError(
                f"job '{config.get('job.name', 'millstream-job')}' is not running (generation {generation}: no "
                "container is starting or running); nothing to drain"
            )
        driver = current_driver(config, store)
        if driver.state in ("lost", "ended"):
            raise DrainRefusedError(
                f"job '{config.get('job.name', 'millstream-job')}' generation {generation}: its driver is "
                f"{driver.describe(int(time.time() * 1000))}, so no run is there to drain (its containers stop by "
                "themselves within job.driver.liveness.timeout.ms); nothing written. Restart it with millstream run"
            )
        default = coordination.job_run_id(config, generation)
        running = sorted({str(status.get("run-id") or default) for status in active.values()})
        if run_id is not None and run_id not in running:
            raise DrainRefusedError(
                f"run '{run_id}' is not the running run of the job (running: {', '.join(running)}); nothing written"
            )
        target = run_id if run_id is not None else running[0]
        coordination.request_drain(store, target)
        return DrainRequest(target, generation, tuple(sorted(active, key=int)))
