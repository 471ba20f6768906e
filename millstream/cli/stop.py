"""``millstream job stop``: the graceful stop of a SIGTERM, for a driver no signal of yours reaches.

In YARN cluster mode the driver runs in the application master's container: a signal to ``spark-submit`` stops
only the client, and ``yarn application -kill`` kills the executors, and their containers, at the same time as
the driver (with a SIGKILL 250 ms after the SIGTERM, ``yarn.nodemanager.sleep-delay-before-sigkill.ms``). This
command writes the runner's own stop signal to the job's metadata store instead: the containers commit and stop,
the driver returns ``stopped`` and exits 0, and the application ends ``SUCCEEDED``. It works for any deployment
whose metadata store this machine reaches.
"""

from __future__ import annotations

from typing import Annotated

import typer

from millstream.cli.common import ConfigPath, Overrides, err, failed, load, out, with_stage
from millstream.errors import MillstreamError
from millstream.job import StopRefusedError, StopRequest

__all__ = ["WAIT_MARGIN_S", "StopRefusedError", "stop"]

WAIT_MARGIN_S = 15.0
"""``--wait`` waits the stop timeout and this long: the driver cancels what has not stopped by then."""


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
    job = load(config, with_stage(overrides, stage))
    try:
        request = job.stop()
    except MillstreamError as error:
        raise failed(error, usage=True) from None
    assert isinstance(request, StopRequest)  # this process runs no job: the signal went to the metadata store
    generation = request.generation
    timeout = job.config.job.stop_timeout_ms / 1000
    out.print(
        f"stop requested for generation {generation} ({len(request.containers)} container(s) active): they commit "
        f"and stop within job.coordinator.stop.timeout.ms ({timeout:g}s)",
        highlight=False,
    )
    if wait and not job.wait_until_stopped(generation, timeout + WAIT_MARGIN_S):
        err.print(f"containers of generation {generation} still active after {timeout + WAIT_MARGIN_S:g}s")
        raise typer.Exit(1)
