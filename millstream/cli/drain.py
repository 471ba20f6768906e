"""``millstream job drain``: stop an unbounded job cleanly, its windows fired and its tasks committed."""

from __future__ import annotations

from typing import Annotated

import typer

from millstream.cli.common import ConfigPath, Overrides, guarded, load, out, with_stage


def drain(
    config: ConfigPath,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Drain only if this is the running run (app.run.id or generation-N)")
    ] = None,
    overrides: Overrides = None,
    stage: Annotated[int | None, typer.Option(help="Drain the job of this stage (run with --stage)")] = None,
) -> None:
    """Drain the running job: its containers stop reading their inputs, pass the drain through the
    intermediate streams (and on to stages run as separate jobs that share app.run.id), fire their windows,
    commit and stop; `millstream run` then exits 0 with the outcome `drained`. A restart resumes after the
    checkpoints. Exits 2, writing nothing, when the job is not running (or --run-id is not its run)."""
    job = load(config, with_stage(overrides, stage))
    request = guarded(lambda: job.drain(run_id), usage=True)
    out.print(
        f"drain requested for run '{request.run_id}' (generation {request.generation}, "
        f"{len(request.containers)} container(s) running): they stop reading their inputs within "
        f"job.drain.poll.interval.ms, commit and stop",
        highlight=False,
    )
