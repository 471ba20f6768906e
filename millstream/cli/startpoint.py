"""``millstream startpoint``: move where a job starts reading, without touching its checkpoints."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from millstream.cli.common import ConfigPath, Overrides, err, guarded, load, out
from millstream.startpoint import (
    Startpoint,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    parse_timestamp,
)

startpoint_app = typer.Typer(no_args_is_help=True, help="Set, list and delete startpoints.")

StreamOption = Annotated[str, typer.Option("--stream", help="system.stream")]
PartitionOption = Annotated[list[int] | None, typer.Option("--partition", "-p", help="Partition (repeatable)")]
TaskOption = Annotated[str | None, typer.Option("--task", help="Only for this task (e.g. 'Partition 3')")]


def _chosen(offset: str | None, timestamp: str | None, oldest: bool, upcoming: bool) -> Startpoint:
    given = [offset is not None, timestamp is not None, oldest, upcoming]
    if sum(given) != 1:
        err.print("[bold red]error:[/] give exactly one of --offset, --timestamp, --oldest, --upcoming")
        raise typer.Exit(2)
    if offset is not None:
        return StartpointSpecific(offset)
    if timestamp is not None:
        return StartpointTimestamp(guarded(lambda: parse_timestamp(timestamp), usage=True))
    return StartpointOldest() if oldest else StartpointUpcoming()


@startpoint_app.command("set")
def startpoint_set(
    config: ConfigPath,
    stream: StreamOption,
    partition: PartitionOption = None,
    all_partitions: Annotated[bool, typer.Option("--all-partitions", help="Every partition of the stream")] = False,
    task: TaskOption = None,
    offset: Annotated[str | None, typer.Option(help="Start at this offset (inclusive)")] = None,
    timestamp: Annotated[str | None, typer.Option(help="Epoch ms or ISO 8601: first record at/after it")] = None,
    oldest: Annotated[bool, typer.Option("--oldest", help="Start at the oldest retained record")] = False,
    upcoming: Annotated[bool, typer.Option("--upcoming", help="Start with records written from now on")] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Make a running job restart its containers to use it")] = False,
    overrides: Overrides = None,
) -> None:
    """Write a startpoint; it applies when the job (re)starts, or right away with --apply."""
    if bool(partition) == all_partitions:
        err.print("[bold red]error:[/] give --partition N (repeatable) or --all-partitions")
        raise typer.Exit(2)
    job = load(config, overrides)
    startpoint = _chosen(offset, timestamp, oldest, upcoming)
    ssps = guarded(
        lambda: job.startpoints.set(
            stream, startpoint, partitions=None if all_partitions else partition, task=task, apply=apply
        ),
        usage=True,
    )
    target = f" for task '{task}'" if task else ""
    out.print(
        f"startpoint {startpoint.describe()} set on {', '.join(s.key() for s in ssps)}{target}"
        + ("; the running job will restart its containers to apply it" if apply else "; applies at the next start"),
        highlight=False,
    )


@startpoint_app.command("list")
def startpoint_list(config: ConfigPath, overrides: Overrides = None) -> None:
    """Pending startpoints (stale ones marked), those given to tasks, and those that failed to resolve."""
    job = load(config, overrides)
    listing = guarded(job.startpoints.show)
    table = Table(title="startpoints")
    for column in ("state", "partition", "task", "startpoint", "created (epoch ms)"):
        table.add_column(column)
    for entry in listing.pending:
        table.add_row(
            "stale" if entry.stale else "pending",
            entry.ssp.key(),
            str(entry.task_name or "(all tasks)"),
            entry.startpoint.describe(),
            str(entry.startpoint.creation_timestamp),
        )
    for task_name, fan_out in listing.fanned_out.items():
        for ssp, startpoint in sorted(fan_out.items()):
            state = "failed" if ssp.key() in listing.failures.get(str(task_name), {}) else "fanned out"
            table.add_row(state, ssp.key(), str(task_name), startpoint.describe(), str(startpoint.creation_timestamp))
    if table.row_count == 0:
        out.print("no startpoints")
        return
    out.print(table)
    for failed_task, failures in listing.failures.items():
        for ssp_key, reason in failures.items():
            out.print(f"[yellow]{failed_task} {ssp_key}: could not be applied: {reason}[/]", highlight=False)


@startpoint_app.command("delete")
def startpoint_delete(
    config: ConfigPath,
    stream: Annotated[str | None, typer.Option("--stream", help="system.stream; all when omitted")] = None,
    partition: PartitionOption = None,
    task: TaskOption = None,
    fanned_out: Annotated[bool, typer.Option("--fanned-out", help="Also those already given to tasks")] = False,
    overrides: Overrides = None,
) -> None:
    """Delete startpoints that have not been applied yet."""
    job = load(config, overrides)
    if partition and not stream:
        err.print("[bold red]error:[/] --partition needs --stream")
        raise typer.Exit(2)
    count = guarded(
        lambda: job.startpoints.clear(stream, partitions=partition or None, task=task, fanned_out=fanned_out),
        usage=True,
    )
    out.print(f"deleted {count} startpoint(s)")
