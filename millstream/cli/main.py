"""The ``millstream`` command.

Exit codes: 0 success (``run``: the job finished, was stopped, or drained), 1 the job failed while
running, 2 the job could not start (bad config, missing stream, unknown factory) or a request was refused
(``job drain`` or ``job stop`` of a job that is not running, ``job reset`` of one that is), 3 (``run``)
another run of the job superseded this one, 130 (``run``) a second Ctrl-C / SIGTERM stopped it without
waiting for the final commits. ``sensitive.*`` values are never printed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table

from millstream.cli.adstore import adstore_app
from millstream.cli.common import ConfigPath, Overrides, err, failed, guarded, load, out, with_stage
from millstream.cli.drain import drain
from millstream.cli.plan import plan
from millstream.cli.reset import reset
from millstream.cli.startpoint import startpoint_app
from millstream.cli.stop import stop
from millstream.cli.version import root
from millstream.config import parse_override
from millstream.config.secrets import mask_secrets_in_logs
from millstream.config.settings import Settings
from millstream.errors import FORCED_STOP_EXIT_CODE, SUPERSEDED_EXIT_CODE, ConfigError, MillstreamError
from millstream.job.streams import stream_of
from millstream.log_context import configure_logging
from millstream.model import SystemStream

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Samza-style stream jobs on Apache Spark.",
)
streams_app = typer.Typer(no_args_is_help=True, help="Create, inspect, write and read streams of any system.")
checkpoint_app = typer.Typer(no_args_is_help=True, help="Inspect checkpoints.")
job_app = typer.Typer(no_args_is_help=True, help="Inspect a job, stop or drain it, or reset it.")
app.callback()(root)
app.add_typer(streams_app, name="streams")
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(job_app, name="job")
app.add_typer(startpoint_app, name="startpoint")
app.add_typer(adstore_app, name="adstore")
app.command("plan")(plan)
job_app.command("drain")(drain)
job_app.command("reset")(reset)
job_app.command("stop")(stop)


StreamArg = Annotated[str, typer.Argument(help="system.stream (a bare name means the log system)")]


def main() -> None:
    """Any millstream error a command did not turn into its exit code itself (a system that cannot be
    reached, say) is one line naming what is at fault, never a traceback."""
    try:
        app()
    except MillstreamError as error:
        sys.exit(failed(error).exit_code)


def _setup_logging(verbose: bool, config: Settings) -> None:
    """The driver logs warnings (``-v``: INFO) in the documented format; so do the containers, which read
    ``MILLSTREAM_LOG_LEVEL``: without ``-v`` their INFO lines stay out of the progress line."""
    level = "INFO" if verbose else "WARNING"
    if verbose:
        os.environ["MILLSTREAM_LOG_LEVEL"] = level
    else:
        os.environ.setdefault("MILLSTREAM_LOG_LEVEL", level)
    configure_logging(level, job=config.job.name)


@app.command()
def run(
    config: ConfigPath,
    overrides: Overrides = None,
    master: Annotated[str | None, typer.Option(help="Spark master URL; default local[containers + 1]")] = None,
    in_process: Annotated[bool, typer.Option("--in-process", help="Run containers as threads, without Spark")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log INFO lines, the containers' and Spark's failed attempts too")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress line while the job runs")] = False,
    stage: Annotated[int | None, typer.Option(help="Run only this stage of the application (app.stage)")] = None,
) -> None:
    """Run a job until its inputs end (bounded), until Ctrl-C / SIGTERM (containers commit first), or until
    `millstream job drain` drains it (outcome `drained`, exit 0). A progress line shows what it processed."""
    from millstream.cli.progress import run_progress

    job = load(config, with_stage(overrides, stage))
    cfg = job.config
    _setup_logging(verbose, cfg)
    mask_secrets_in_logs(cfg)
    # Planned without publishing: a missing stream, task class or system fails in well under a second, before
    # Spark's JVM starts; the plan also tells the progress line which partitions the job reads.
    # One set of driver services for the command: the plan, the progress line and the run share its admins.
    with job, job.driver_services() as services:
        model = guarded(job.model)
        with run_progress(cfg, model, err, quiet, services) as progress:
            try:
                if in_process:
                    result = guarded(lambda: job.run("in-process", handle_signals=True))
                else:
                    result = guarded(lambda: job.run("spark", master=master, verbose=verbose, handle_signals=True))
            except KeyboardInterrupt:  # a second signal: the containers were told to stop, no one waits for a commit
                raise typer.Exit(FORCED_STOP_EXIT_CODE) from None
            if progress is not None:
                progress.finish(result)
    if result.outcome == "failed":
        err.print(f"[bold red]job failed:[/] {result.error}", highlight=False)
        raise typer.Exit(1)
    if result.outcome == "superseded":
        err.print(
            f"job {cfg.get('job.name', 'millstream-job')} {result.error}, by another run of the same job; this run "
            "handed over without a final commit, and the newer run resumes from its last checkpoint",
            highlight=False,
        )
        raise typer.Exit(SUPERSEDED_EXIT_CODE)
    table = Table(title=f"job {cfg.get('job.name', 'millstream-job')} generation {result.generation}: {result.outcome}")
    for column in ("container", "tasks", "messages", "commits", "seconds", "pid"):
        table.add_column(column, justify="right" if column != "container" else "left")
    for container in result.containers:
        table.add_row(
            container.container_id,
            str(len(container.processed)),
            str(container.messages),
            str(container.commits),
            f"{container.seconds:.2f}",
            str(container.pid),
        )
    out.print(table)


def _stream(name: str) -> SystemStream:
    return guarded(lambda: stream_of(name))


@streams_app.command("create")
def streams_create(
    config: ConfigPath,
    stream: StreamArg,
    partitions: Annotated[int, typer.Option("--partitions", "-p", min=1)] = 1,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="System setting key=value")] = None,
    overrides: Overrides = None,
) -> None:
    """Create a stream (no change if it exists)."""
    job = load(config, overrides)
    target = _stream(stream)
    settings = dict(parse_override(o) for o in option or [])
    created = guarded(lambda: job.streams.create(target, partitions, settings))
    plural = "" if partitions == 1 else "s"
    out.print(f"created: {target} ({partitions} partition{plural})" if created else f"exists: {target}")


@streams_app.command("list")
def streams_list(
    config: ConfigPath,
    system: Annotated[str, typer.Option(help="System to list")] = "log",
    overrides: Overrides = None,
) -> None:
    """List the streams of a system."""
    job = load(config, overrides)
    names = guarded(lambda: job.streams.list(system))
    for name in names:
        out.print(f"{system}.{name}", highlight=False)


@streams_app.command("describe")
def streams_describe(config: ConfigPath, stream: StreamArg, overrides: Overrides = None) -> None:
    """Partitions of a stream with their oldest, newest and upcoming offsets."""
    job = load(config, overrides)
    target = _stream(stream)
    metadata = guarded(lambda: job.streams.describe(target))
    if metadata is None:
        err.print(f"[bold red]error:[/] stream '{target}' does not exist", highlight=False)
        raise typer.Exit(2)
    table = Table(title=f"{target}: {metadata.partition_count} partition(s)")
    for column in ("partition", "oldest", "newest", "upcoming", "sealed"):
        table.add_column(column, justify="right")
    for partition, info in sorted(metadata.partitions.items()):
        table.add_row(
            str(partition),
            str(info.oldest_offset),
            str(info.newest_offset),
            info.upcoming_offset,
            "yes" if info.sealed else "",
        )
    out.print(table)


@streams_app.command("delete")
def streams_delete(config: ConfigPath, stream: StreamArg, overrides: Overrides = None) -> None:
    """Delete a stream and its data."""
    job = load(config, overrides)
    target = _stream(stream)
    deleted = guarded(lambda: job.streams.delete(target))
    out.print(f"{'deleted' if deleted else 'no such stream'}: {target}", highlight=False)


@streams_app.command("seal")
def streams_seal(config: ConfigPath, stream: StreamArg, overrides: Overrides = None) -> None:
    """Mark a log stream complete: jobs reading it reach end-of-stream at its end."""
    job = load(config, overrides)
    target = _stream(stream)
    guarded(lambda: job.streams.seal(target), usage=True)
    out.print(f"sealed: {target}", highlight=False)


def _records(source: Iterator[str], fmt: str, key_field: str | None) -> Iterator[tuple[Any, Any]]:
    for number, line in enumerate(source, start=1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        if fmt == "lines":
            yield None, line
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise ConfigError(f"input line {number} is not valid JSON: {error}") from None
        key = value.get(key_field) if key_field and isinstance(value, dict) else None
        yield key, value


@streams_app.command("produce")
def streams_produce(
    config: ConfigPath,
    stream: StreamArg,
    file: Annotated[Path | None, typer.Option("--file", "-f", help="Read from a file instead of stdin")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="lines (one message per line) or json (one JSON per line)")
    ] = "lines",
    key_field: Annotated[str | None, typer.Option("--key-field", help="json: the field holding the key")] = None,
    partition: Annotated[int | None, typer.Option(help="Write every message to this partition")] = None,
    overrides: Overrides = None,
) -> None:
    """Write messages from stdin or a file, serialized with the stream's configured serdes."""
    if fmt not in ("lines", "json"):
        err.print(f"[bold red]error:[/] --format must be lines or json, not '{fmt}'", highlight=False)
        raise typer.Exit(2)
    job = load(config, overrides)
    target = _stream(stream)
    key_serde, msg_serde = guarded(lambda: job.streams.serdes(target))

    def encoded(pairs: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        for key, value in pairs:
            if msg_serde is None:
                value = value.encode() if isinstance(value, str) else orjson.dumps(value)
            if key is not None and key_serde is None:
                key = key.encode() if isinstance(key, str) else orjson.dumps(key)
            yield key, value

    handle = file.open(encoding="utf-8") if file else sys.stdin
    try:
        count = guarded(
            lambda: job.streams.write(target, encoded(_records(iter(handle), fmt, key_field)), partition=partition)
        )
    finally:
        if file:
            handle.close()
    err.print(f"produced {count} message(s) to {target}", highlight=False)


@streams_app.command("consume")
def streams_consume(
    config: ConfigPath,
    stream: StreamArg,
    limit: Annotated[int | None, typer.Option(help="Stop after this many messages")] = None,
    headers: Annotated[bool, typer.Option("--headers", help="Print each record's headers too")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Print keys and values as stored, without the serdes")] = False,
    overrides: Overrides = None,
) -> None:
    """Print every retained record as a JSON line: partition, offset, timestamp, key, value.

    A record the stream's serdes cannot decode is printed raw with an ``error`` naming its offset, and
    reading goes on: dead-lettered records and a newer producer's output stay readable."""
    from millstream.cli.records import RecordPrinter

    job = load(config, overrides)
    target = _stream(stream)
    printer = guarded(lambda: RecordPrinter.of(job.streams.serdes(target), headers=headers, raw=raw))
    try:
        for _, envelopes in job.streams.records(target):
            for envelope in envelopes:
                if limit is not None and printer.printed >= limit:
                    return
                print(printer.line(envelope))
    except MillstreamError as error:
        raise failed(error) from None


@checkpoint_app.command("show")
def checkpoint_show(config: ConfigPath, overrides: Overrides = None) -> None:
    """The last checkpoint of every task, per partition."""
    job = load(config, overrides)
    checkpoints = guarded(job.checkpoints.show)
    if not checkpoints:
        out.print("no checkpoints")
        return
    table = Table(title="checkpoints")
    for column in ("task", "partition", "offset"):
        table.add_column(column)
    for task_name in sorted(checkpoints, key=lambda n: n.sort_key()):
        for ssp, offset in sorted(checkpoints[task_name].offsets.items()):
            table.add_row(str(task_name), ssp.key(), str(offset))
    out.print(table)


def _backoff(info: dict[str, Any]) -> str:
    """The restart delay: how much of it is left while the container waits (``backoff``), else the last one."""
    if info.get("state") == "backoff" and "backoff-until" in info:
        left = max(0.0, int(info["backoff-until"]) / 1000 - time.time())
        return f"{left:.1f}s left of {int(info.get('backoff-ms', 0)) / 1000:.1f}s"
    return f"{int(info['backoff-ms']) / 1000:.1f}s" if "backoff-ms" in info else "-"


@job_app.command("status")
def job_status(
    config: ConfigPath,
    overrides: Overrides = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw live until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(help="--watch: seconds between redraws", min=0.2)] = 2.0,
) -> None:
    """Job model, generation, container states and lag per partition (upcoming - next to process)."""
    job = load(config, overrides)
    if watch:
        from millstream.cli.live import watch as watch_live

        watch_live(lambda: guarded(job.status_document), interval)
        return
    status = guarded(job.status)
    if status.model is None:
        out.print("the job has never run (no job model)")
        return
    out.print(
        f"generation {status.model.generation}: {len(status.model.containers)} container(s), "
        f"{len(status.model.tasks)} task(s); driver {status.driver.describe(int(time.time() * 1000))}",
        highlight=False,
    )
    if status.driver.state == "lost":
        out.print(
            "the run lost its driver: containers still shown running stop by themselves (committing) within "
            "job.driver.liveness.timeout.ms of it; restart the job with millstream run",
            highlight=False,
        )
    containers = Table(title="containers")
    for column in ("container", "state", "attempt", "restarts", "backoff", "pid", "host"):
        containers.add_column(column)
    for cid in sorted(status.model.containers, key=int):
        info = status.containers.get(cid, {})
        containers.add_row(
            cid,
            str(info.get("state", "-")),
            str(info.get("attempt", "-")),
            str(info.get("restarts", "-")),
            _backoff(info),
            str(info.get("pid", "-")),
            str(info.get("host", "-")),
        )
    out.print(containers)
    lag = Table(title="lag")
    for column in ("task", "partition", "checkpointed", "upcoming", "lag"):
        lag.add_column(column, justify="right" if column in ("lag",) else "left")
    for row in status.lag:
        lag.add_row(
            row.task, row.ssp.key(), str(row.checkpointed), str(row.upcoming), "-" if row.lag is None else str(row.lag)
        )
    out.print(lag)
    if status.adjunct:
        adjunct = Table(title="adjunct stores (positions at their last commit)")
        for column in ("store", "owner", "partition", "read up to", "upcoming", "lag", "committed", "version"):
            adjunct.add_column(column, justify="right" if column == "lag" else "left")
        now_ms = time.time() * 1000
        for position in status.adjunct:
            adjunct.add_row(
                position.store, position.owner, position.ssp.key(), position.position, str(position.upcoming),
                "-" if position.lag is None else str(position.lag),
                f"{(now_ms - position.committed_ms) / 1000:.0f}s ago", position.version or "-",
            )  # fmt: skip
        out.print(adjunct)
    for task, failures in status.startpoint_failures.items():
        for ssp_key, reason in failures.items():
            err.print(f"[yellow]startpoint of {task} {ssp_key} could not be applied: {reason}[/]", highlight=False)


if __name__ == "__main__":
    main()
