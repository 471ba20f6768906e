"""How many partition files the embedded log's pools keep open: what the config says, else a share of the
process's hard open-file limit (``ulimit -Hn``).

Reopening a partition file costs far more than using an open one (about 2 ms on a disk: SQLite checkpoints a
file when its last connection closes), so a pool smaller than the partitions a container keeps busy makes every
poll or commit reopen files: a 1,000-task container whose producer pool held 256 of its 1,000 changelog
partitions spent 2.6 times the CPU on a commit round. A fixed default either thrashes like that on hosts with room
to spare or fails on hosts with a low limit; so by default the pools share what the hard limit allows, which a
container then raises its soft limit to (``millstream.runtime.file_limit``):

* the pools together: half of the hard limit (``SHARE``) less ``SPARE``, at ``DESCRIPTORS_PER_PARTITION`` each;
* the admin's pool: 256, or a quarter of that if it is fewer;
* the consumer's and the producer's: each half of the rest, at most ``AUTO_MAX`` (an open partition also holds
  memory, about 70 KB), at least ``AUTO_MIN``.

With the 3 descriptors per partition first assumed and all of the hard limit shared, 10,000 input and 10,000
output partitions ran out of descriptors under a hard limit of 20,000.

A key set in the config wins. An idle consumer partition is closed after a second whatever the bound, so a
large bound costs descriptors only for partitions that are busy.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

DESCRIPTORS_PER_PARTITION = 4
"""File descriptors an open partition holds: its SQLite file, its ``-wal``, its ``-shm`` (shared by a process's
connections to the same file, but a consumer's input and a producer's output are different files) and the segment
file it reads or appends to (a reader going back over older segments holds a few more for a while, which the
container's headroom covers)."""

SHARE = 0.5
"""The part of the hard limit the pools share by default; the rest is for everything else of the process
(RocksDB's files, sockets, the metadata store, the interpreter's own) and for what the per-partition count misses."""

SPARE = 512
"""Descriptors of the pools' share left out as well."""

ADMIN_DEFAULT = 256
AUTO_MAX = 4096
AUTO_MIN = 8


@dataclass(frozen=True)
class PoolBounds:
    """Partition files each pool keeps open at most."""

    admin: int
    consumer: int
    producer: int

    @property
    def descriptors(self) -> int:
        """What the three pools may hold open (the admin opens one around a query even with a pool of 0)."""
        return (max(self.admin, 1) + self.consumer + self.producer) * DESCRIPTORS_PER_PARTITION


def pool_bounds(
    admin: int | None, consumer: int | None, producer: int | None, hard_limit: int | None = None
) -> PoolBounds:
    """The bounds for the configured values (None: not set), shares of ``hard_limit`` (default: the process's)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard_limit is None else hard_limit
    unlimited = hard == resource.RLIM_INFINITY
    partitions = (
        ADMIN_DEFAULT + 2 * AUTO_MAX if unlimited else max(0, int(hard * SHARE) - SPARE) // DESCRIPTORS_PER_PARTITION
    )
    admin_bound = admin if admin is not None else min(ADMIN_DEFAULT, partitions // 4)
    share = max(AUTO_MIN, min(AUTO_MAX, (partitions - admin_bound) // 2))
    return PoolBounds(
        admin_bound,
        consumer if consumer is not None else share,
        producer if producer is not None else share,
    )
