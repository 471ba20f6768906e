"""``millstream adstore``: bulk-build versions of adjunct data stores, list them, and mark the end of a
version in a store's input stream.

Exit codes as everywhere: 2 for a request that cannot start (bad config, unknown store, missing column
or dataset), 1 for a build that failed (bad records, Spark or blob store failures).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.table import Table

from millstream.adjunct.published import PublishedVersion
from millstream.cli.common import ConfigPath, Overrides, err, guarded, load, out
from millstream.job import Job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

adstore_app = typer.Typer(no_args_is_help=True, help="Bulk-build and inspect versions of adjunct data stores.")

StoreOption = Annotated[str, typer.Option("--store", help="The adjunct store (stores.<name>.adstore.input)")]


@adstore_app.command("build")
def adstore_build(
    config: ConfigPath,
    store: StoreOption,
    source: Annotated[str | None, typer.Option("--from", help="Dataset path or URL Spark can read")] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="With --from: parquet, json (lines) or csv (with a header)")
    ] = None,
    table: Annotated[str | None, typer.Option("--table", help="A table of the session's catalog, instead")] = None,
    sql: Annotated[str | None, typer.Option("--sql", help="A SQL query whose rows are the dataset, instead")] = None,
    key: Annotated[str, typer.Option("--key", help="The key column")] = "key",
    value: Annotated[
        str | None, typer.Option("--value", help="The value column; default 'value', else the row minus the key")
    ] = None,
    master: Annotated[str | None, typer.Option(help="Spark master URL; default spark.master, else local[*]")] = None,
    remote: Annotated[
        str | None,
        typer.Option(envvar="SPARK_REMOTE", help="Build through Spark Connect at this sc://host:port instead"),
    ] = None,
    overrides: Overrides = None,
) -> None:
    """Build a version from a dataset, table or query with Spark and publish it: the running job switches to it."""
    from millstream.spark.builds.adstore_build import DatasetSchemaError, resolve_target

    dataset, kind = _dataset(source, fmt, table, sql)
    if remote is not None and master is not None:
        _usage("--master and --remote (or SPARK_REMOTE) exclude each other: Spark Connect runs on its server's master")
    job = load(config, overrides)
    guarded(lambda: resolve_target(job.config, store))  # a bad store fails before Spark's JVM starts
    session = guarded(lambda: _session(job, master, remote))

    def build() -> PublishedVersion:
        try:
            return job.adstores.build(session, store, dataset, kind, key_column=key, value_column=value)
        except DatasetSchemaError as error:  # the request names a dataset or column that is not there: usage
            err.print(f"[bold red]error:[/] {error}", highlight=False)
            raise typer.Exit(2) from None

    try:
        record = guarded(build)
    finally:
        session.stop()
    _print_version(record, store)


def _dataset(source: str | None, fmt: str | None, table: str | None, sql: str | None) -> tuple[str, str]:
    """(source, kind) from the one input given: ``--from`` with ``--format``, ``--table`` or ``--sql``."""
    from millstream.spark.builds.adstore_build import FORMATS

    given = [name for name, option in (("--from", source), ("--table", table), ("--sql", sql)) if option is not None]
    if len(given) != 1:
        shown = ", ".join(given) or "none"
        _usage(f"give exactly one input: --from PATH --format FMT, --table NAME or --sql QUERY (given: {shown})")
    if source is not None:
        if fmt not in FORMATS:
            _usage(f"--format must be one of {', '.join(FORMATS)}, not '{fmt}'")
        return source, str(fmt)
    if fmt is not None:
        _usage(f"--format applies to --from only, not to {given[0]}")
    return (table, "table") if table is not None else (str(sql), "sql")


def _usage(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def _session(job: Job, master: str | None, remote: str | None) -> SparkSession:
    if remote is not None:
        from millstream.spark.connect import remote_session

        return remote_session(remote)
    from millstream.spark.run.multi_host import refuse_host_local_blobs

    chosen = master or job.config.get("spark.master") or "local[*]"
    refuse_host_local_blobs(job.config, chosen)  # before Spark's JVM starts
    return job.spark_session(chosen)


def _print_version(record: PublishedVersion, store: str) -> None:
    out.print(f"published version {record.version} of store '{store}'", highlight=False)
    out.print(f"layout: {record.layout}", highlight=False)
    out.print(f"records: {record.records} (skipped {record.skipped} with a null value)", highlight=False)
    files = record.blobs_for(None)
    out.print(f"files: {len(files)}", highlight=False)
    for name in sorted(record.files, key=lambda n: (0, int(n)) if n.isdigit() else (1, n)):
        for blob_id in record.files[name]:
            label = f"partition {name}" if record.layout == "partitioned" else "all containers"
            out.print(f"  {label}: {blob_id}", highlight=False)


@adstore_app.command("versions")
def adstore_versions(config: ConfigPath, store: StoreOption, overrides: Overrides = None) -> None:
    """The published versions still kept (the newest two), newest last; the latest is what jobs serve."""
    job = load(config, overrides)
    versions, latest = guarded(lambda: job.adstores.versions(store))
    if not versions:
        out.print(f"no published versions of store '{store}'", highlight=False)
        return
    table = Table(title=f"versions of adjunct store '{store}'")
    for column in ("version", "latest", "layout", "files", "records", "created", "source"):
        table.add_column(column, justify="right" if column in ("files", "records") else "left")
    for record in versions:
        table.add_row(
            record.version,
            "yes" if latest is not None and latest.version == record.version else "",
            record.layout,
            str(len(record.blobs_for(None))),
            str(record.records),
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created_ms / 1000)),
            record.source,
        )
    out.print(table)


@adstore_app.command("end-version")
def adstore_end_version(
    config: ConfigPath,
    store: StoreOption,
    label: Annotated[str, typer.Option("--label", help="The version the marker ends")],
    overrides: Overrides = None,
) -> None:
    """Write an end-of-version marker to every partition of the store's input stream: the version written
    to the stream so far is sealed and readers switch to it."""
    job = load(config, overrides)
    stream, partitions = guarded(lambda: job.adstores.end_version(store, label))
    out.print(f"end of version '{label}' marked on {partitions} partition(s) of {stream}", highlight=False)
