"""``systems.<s>.*`` settings of a log system: one typed view, the defaults in one place, read once per settings
(``settings.view(LogSystemConfig, system)``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from millstream.config.core import Config
from millstream.config.views import Bool
from millstream.contracts.systems import SystemConfigView


class LogSystemConfig(SystemConfigView):
    """The keys a log system accepts under ``systems.<s>.`` (besides ``samza.*`` and ``streams.*``)."""

    path: str | None = None
    """Root directory of the log; default ``<job.data.dir>/log``."""
    fsync: Bool = False
    """``synchronous=FULL``, and each batch synced to its segment file before its index row commits: a flushed
    write survives power loss, not only a process crash. The same for the transaction coordinator file
    (``.transactions.db``: exactly-once commits and ``task.checkpoint.factory=log`` checkpoints)."""
    poll_batch_size: int = Field(5000, alias="poll.batch.size", ge=1)
    """Most records one ``poll`` reads per partition."""
    producer_batch_size: int = Field(1000, alias="producer.batch.size", ge=1)
    """Records a producer buffers before it writes them in one transaction."""
    producer_linger_ms: int = Field(5, alias="producer.linger.ms", ge=0)
    """Longest time a record waits in a producer's buffer before it is written (and readable), as Kafka's
    ``linger.ms``: a container's run loop writes what waited this long between batches, and everything held
    as soon as a poll finds no input waiting (no record would join the batch); a buffer that fills up is
    written at once. So records linger only while input keeps coming, where batching pays."""
    producer_linger_when_drained: Bool = Field(False, alias="producer.linger.when.drained")
    """Let records wait all of ``producer.linger.ms`` even when the run loop finds no input waiting, instead of
    writing them at once: fewer, larger appends at low input rates, for output that may wait (with a linger
    longer than ``task.commit.ms``, output is written at each commit)."""
    auto_create_streams: Bool = Field(False, alias="auto.create.streams")
    """Create a missing output stream on first send instead of failing."""
    default_partitions: int = Field(1, alias="default.partitions", ge=1)
    """Partitions of a stream created on first send."""
    retention_ms: int = Field(-1, alias="retention.ms", ge=-1)
    """Age after which ``trim_expired`` removes records (and deletes the segment files they filled); -1 keeps
    them forever."""

    transaction_timeout_ms: int = Field(60_000, alias="transaction.timeout.ms", ge=1)
    """Exactly-once: longest time a container's transaction may stay open, from its first append (as Kafka's
    ``transaction.timeout.ms``). Past it, the transaction can no longer commit: the first reader held at its
    records, the admin or the job's next attempt aborts it, its records are never visible, and its container's
    commit fails naming it (the next attempt restores from the last checkpoint). So a container that died for
    good holds readers of its partitions for at most this long. Must exceed ``task.commit.ms``: a live
    container's transactions last about one commit interval. Hosts sharing the log compare deadlines on their
    wall clocks."""
    admin_open_partitions_max: int | None = Field(None, alias="admin.open.partitions.max", ge=0)
    """Partition files the system's admin keeps open between metadata queries (each holds about four file
    descriptors), the least recently asked about closed first: a container's tasks ask about their changelog and
    input partitions at every commit and at start-up, and reopening a file costs more than the query. A file
    deleted or re-created since is reopened before it answers. 0 opens and closes the file around each query.
    Unset: 256, or fewer when the hard open-file limit is low (``open_files``: a quarter of the partition files
    it allows)."""

    consumer_open_partitions_max: int | None = Field(None, alias="consumer.open.partitions.max", ge=1)
    """Partition files a consumer keeps open (each holds about four file descriptors and 70 KB), the least
    recently read closed first; a partition quiet for a second is closed anyway. A closed partition costs a few
    hundred bytes and no descriptor: while it has nothing to read, a poll compares its files' size and
    modification time (``os.stat``) instead of querying it, and reopens it when they change (or, as a backstop,
    once a minute). Partitions with data beyond this bound are reopened in turn, each still read at every poll,
    so it should hold every partition busy at once. Unset: a share of the hard open-file limit (``ulimit -Hn``,
    see ``open_files``: 1,058 partitions with a hard limit of 20,000), to which a container raises its soft limit at
    start; set it lower where other code of the process needs the descriptors."""
    producer_open_partitions_max: int | None = Field(None, alias="producer.open.partitions.max", ge=1)
    """Partition files a producer keeps open for appends (each holds about four file descriptors), the least
    recently appended to closed first and reopened by its next append (about 2 ms for the close and the reopen
    on a slow disk: SQLite checkpoints a file its last connection closes), so it should hold every partition a
    container writes between two commits (a changelog partition per task, the outputs). Unset: the same share
    of the hard open-file limit as the consumer's. Under exactly-once a transaction's partitions need not stay
    open: its open batches are in the files, and the commit reopens the ones it publishes in, so the bound holds
    however many partitions a transaction writes."""

    def root(self, config: Config) -> Path:
        """The log's root directory, always absolute (executors run in other working directories)."""
        if self.path:
            return Path(self.path).expanduser().resolve()
        data_dir = config.get("job.data.dir") or ".millstream"
        return (Path(data_dir).expanduser() / "log").resolve()


def config_keys() -> frozenset[str]:
    return LogSystemConfig.keys()
