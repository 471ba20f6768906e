"""``millstream job reset``: start a stopped job over (Kafka Streams' application reset tool)."""

from __future__ import annotations

from typing import Annotated

import typer

from millstream.cli.common import ConfigPath, Overrides, guarded, load, out, with_stage


def reset(
    config: ConfigPath,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Reset even though containers are reported running (they died unseen)")
    ] = False,
    overrides: Overrides = None,
    stage: Annotated[int | None, typer.Option(help="Reset the job of this stage (run with --stage)")] = None,
) -> None:
    """Delete the job's checkpoints, startpoints, control state, local and remote store state, changelogs and
    intermediate streams, so its next run starts over from its inputs' samza.offset.default with empty stores.
    Its inputs and outputs stay. Exits 2, deleting nothing, while the job runs."""
    job = load(config, with_stage(overrides, stage))
    plan = guarded(lambda: job.reset(dry_run=dry_run, force=force), usage=True)
    if plan.empty:
        out.print(f"job '{plan.job}' has nothing to reset", highlight=False)
        return
    out.print(f"{'would delete' if dry_run else 'deleted'} for job '{plan.job}':", highlight=False)
    for line in plan.lines():
        out.print(f"  {line}", highlight=False, markup=False)
    if dry_run:
        out.print("dry run: nothing was deleted", highlight=False)
