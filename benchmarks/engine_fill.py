"""RocksDB's own fill of the records a changelog restore replays, run natively by ``db_bench``: the engine's ceiling.

    python -m benchmarks.engine_fill fetch      # Debian's rocksdb-tools, unpacked into the cache (no root needed)

A changelog restore into a RocksDB store goes through RocksDB's write path: every record is a memtable insert,
every full memtable is sorted and written as a table file. ``db_bench``, RocksDB's own benchmark in C++, drives the
same path with no Python in it, so the time it takes to fill a store with the same number of keys of the same sizes,
with the options a replay opens the store with, is what the engine itself needs on this machine: a restore can
approach it, not pass it. ``benchmarks/scale.py`` runs it beside each restore, as one more row against the disk.

The options mirror the store's during a replay (``storage/rocksdb.py``, ``storage/bulk_load.py``): the WAL off,
Snappy (RocksDB's default, as the stores keep it), ``container.write.buffer.size.bytes`` and
``rocksdb.num.write.buffers``, automatic compactions on; keys in random order go into a vector memtable with
``BULK_LOAD_BACKGROUND_JOBS`` background jobs (``filluniquerandom``: every key once, in random order, as a changelog
of distinct keys holds them), keys in key order into the skiplist (``fillseq``), as the replay's bulk loader
chooses; values as compressible as ``benchmarks.state_common.fill_store``'s (one byte repeated); writes in batches of
the embedded log's producer batch. The
``db_bench`` of Debian 12 is RocksDB 7.8, where rocksdict bundles 9.x: a reference of the same design, not the same
build. Its wall seconds and its CPU seconds (user and system, every thread's) are what is reported."""

from __future__ import annotations

import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from millstream.storage.rocksdb import BULK_LOAD_BACKGROUND_JOBS

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "millstream" / "db-bench"
"""Where ``fetch`` unpacks Debian's packages: ``usr/bin/db_bench`` and the libraries it loads."""

PACKAGES = ("rocksdb-tools", "librocksdb7.8", "libgflags2.2", "libsnappy1v5")
"""``db_bench`` and the libraries it needs beyond a Debian 12 base system."""

ENVIRONMENT = "MILLSTREAM_DB_BENCH"
"""A ``db_bench`` to run instead of the fetched one or one on ``PATH``."""


class EngineFillError(RuntimeError):
    """``db_bench`` failed, or did not report the fill it was asked for."""


class DbBenchMissingError(EngineFillError):
    """This machine has no ``db_bench``: not fetched, not installed, not named."""


@dataclass(frozen=True)
class Fill:
    """What one store's fill should look like: the replay's keys, their sizes and order, and its memtables."""

    keys: int
    key_size: int
    value_size: int
    random_order: bool
    write_buffer_size: int
    write_buffers: int
    batch: int


def db_bench() -> tuple[str, dict[str, str]]:
    """The ``db_bench`` to run and its environment: ``$MILLSTREAM_DB_BENCH``, else the fetched one (its libraries
    on ``LD_LIBRARY_PATH``), else one on ``PATH``."""
    environment = dict(os.environ)
    if chosen := os.environ.get(ENVIRONMENT):
        return chosen, environment
    fetched = CACHE / "usr" / "bin" / "db_bench"
    if fetched.exists():
        libraries = str(CACHE / "usr" / "lib" / "x86_64-linux-gnu")
        environment["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libraries, environment.get("LD_LIBRARY_PATH")]))
        return str(fetched), environment
    if found := shutil.which("db_bench"):
        return found, environment
    raise DbBenchMissingError(
        f"no db_bench: run `python -m benchmarks.engine_fill fetch` (Debian's {PACKAGES[0]}), install it, "
        f"or set {ENVIRONMENT}"
    )


def benchmark_of(fill: Fill) -> str:
    """The ``db_bench`` benchmark that writes ``fill``'s keys: each once, shuffled or in key order."""
    return "filluniquerandom" if fill.random_order else "fillseq"


def command(program: str, fill: Fill, directory: Path) -> list[str]:
    """``db_bench``'s arguments for ``fill`` into a new database at ``directory``. ``db_bench`` writes whole batches
    only (3,500 keys in batches of 1,000 fill 3,000), so its batch is the largest that divides both the keys and
    ``fill.batch``."""
    benchmark, memtable = benchmark_of(fill), "vector" if fill.random_order else "skip_list"
    arguments = [
        program,
        f"--benchmarks={benchmark}",
        f"--db={directory}",
        f"--num={fill.keys}",
        f"--key_size={fill.key_size}",
        f"--value_size={fill.value_size}",
        f"--batch_size={math.gcd(fill.batch, fill.keys)}",
        f"--write_buffer_size={fill.write_buffer_size}",
        f"--max_write_buffer_number={fill.write_buffers}",
        f"--memtablerep={memtable}",
        "--disable_wal=1",
        "--compression_type=snappy",
        "--compression_ratio=0.01",
        "--allow_concurrent_memtable_write=false",
        "--threads=1",
        "--seed=36",
    ]
    if fill.random_order:
        arguments.append(f"--max_background_jobs={BULK_LOAD_BACKGROUND_JOBS}")
    return arguments


def operations(output: str, benchmark: str) -> int:
    """The operations ``db_bench`` reports for ``benchmark`` (its line ``fillseq : ... N operations;``)."""
    match = re.search(rf"^{benchmark}\s*:.*?(\d+) operations;", output, re.MULTILINE)
    if match is None:
        raise EngineFillError(f"db_bench reported no {benchmark} line:\n{output}")
    return int(match.group(1))


def engine_fill(fill: Fill, directory: Path) -> tuple[float, float]:
    """Fill a new database at ``directory`` as ``fill`` says, natively, and remove it: the wall seconds and the CPU
    seconds (user and system, every thread) of the whole ``db_bench`` process, from its start until it closed the
    database, the last memtable flushed. Raises ``EngineFillError`` when it fails or filled fewer keys."""
    program, environment = db_bench()
    shutil.rmtree(directory, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command(program, fill, directory), capture_output=True, text=True, env=environment)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(directory, ignore_errors=True)
    if done.returncode != 0:
        raise EngineFillError(f"db_bench exited with {done.returncode}:\n{done.stderr or done.stdout}")
    if (filled := operations(done.stdout, benchmark_of(fill))) != fill.keys:
        raise EngineFillError(f"db_bench filled {filled} keys of {fill.keys}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def fetch(cache: Path = CACHE) -> Path:
    """Download Debian's ``rocksdb-tools`` and the libraries ``db_bench`` loads (``apt-get download``: no root) and
    unpack them into ``cache``; the path of ``db_bench``. Done once: a cache holding it is kept."""
    program = cache / "usr" / "bin" / "db_bench"
    if program.exists():
        return program
    downloads = cache / "debs"
    downloads.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=downloads, check=True)
    for package in sorted(downloads.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(package), str(cache)], check=True)
    if not program.exists():
        raise EngineFillError(f"the packages {PACKAGES} held no usr/bin/db_bench")
    return program


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m benchmarks.engine_fill fetch")
    print(fetch())
