"""``millstream job stop``: the graceful stop of a SIGTERM, for a driver no signal of yours reaches.

In YARN cluster mode the driver runs in the application master's container: a signal to ``spark-submit`` stops
only the client, and ``yarn application -kill`` kills the executors, and their containers, at the same time as
the driver (with a SIGKILL 250 ms after the SIGTERM, ``yarn.nodemanager.sleep-delay-before-sigkill.ms``). This
command writes the runner's own stop signal to the job's metadata store instead: the containers commit and stop,
the driver returns ``stopped`` and exits 0, and the application ends ``SUCCEEDED``. It works for any deployment
whose metadata store this machine reaches.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from millstream.cli.common import ConfigPath, Overrides, err, failed, load, out
from millstream.config import Config, JobConfig
from millstream.coordinator.drain import ACTIVE_STATES
from millstream.errors import MillstreamError
from millstream.metadata import coordination
from millstream.metadata.base import MetadataStore
from millstream.metadata.factory import metadata_store

WAIT_MARGIN_S = 15.0
"""``--wait`` waits the stop timeout and this long: the driver cancels what has not stopped by then."""


class StopRefusedError(MillstreamError):
    """The job is not running: nothing was written."""

    exit_code = 2


def stop(
    config: ConfigPath,
    wait: Annotated[
        bool, typer.Option("--wait", help="Return once every container stopped (exit 1 if one is still active)")
    ] = False,
    overrides: Overrides = None,
    stage: Annotated[int | None, typer.Option(help="Stop the job of this stage (run with --stage)")] = None,
) -> None:
    """Stop the running job gracefully, as a SIGTERM to `millstream run` does: its containers commit and stop
    within job.coordinator.stop.timeout.ms, and the driver (millstream run, or spark-submit's in any deploy mode,
    YARN cluster mode included) exits 0 with the outcome `stopped`. Exits 2, writing nothing, when the job is not
    running."""
    cfg = load(config, [*(overrides or []), *([f"app.stage={stage}"] if stage is not None else [])])
    try:
        generation, containers = request_stop(cfg)
    except MillstreamError as error:
        raise failed(error, usage=True) from None
    timeout = JobConfig.of(cfg).stop_timeout_ms / 1000
    out.print(
        f"stop requested for generation {generation} ({len(containers)} container(s) active): they commit and "
        f"stop within job.coordinator.stop.timeout.ms ({timeout:g}s)",
        highlight=False,
    )
    if wait and not wait_until_stopped(cfg, generation, timeout + WAIT_MARGIN_S):
        err.print(f"containers of generation {generation} still active after {timeout + WAIT_MARGIN_S:g}s")
        raise typer.Exit(1)


def request_stop(config: Config) -> tuple[int, list[str]]:
    """Write the stop signal for the job's current generation; its number and the containers then active."""
    store = metadata_store(config)
    store.init()
    try:
        generation = coordination.current_generation(store)
        active = _active(store, generation)
        if generation == 0 or not active:
            raise StopRefusedError(
                f"job '{JobConfig.of(config).name}' is not running (generation {generation}: no container is "
                "starting or running); nothing to stop"
            )
        coordination.request_stop(store, generation)
        return generation, active
    finally:
        store.close()


def wait_until_stopped(config: Config, generation: int, timeout_s: float) -> bool:
    """Whether every container of ``generation`` left the active states within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    store = metadata_store(config)
    try:
        while _active(store, generation):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        return True
    finally:
        store.close()


def _active(store: MetadataStore, generation: int) -> list[str]:
    statuses = coordination.container_statuses(store)
    active = [
        cid
        for cid, status in statuses.items()
        if status.get("generation") == generation and status.get("state") in ACTIVE_STATES
    ]
    return sorted(active, key=int)
