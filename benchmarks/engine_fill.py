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
from tests.integration.processes import cache_dir

CACHE = cache_dir("MILLSTREAM_DB_BENCH_CACHE", "db-bench")
"""Where ``fetch`` unpacks Debian's packages, ``usr/bin/db_bench`` and the libraries it loads: the test servers' cache
(``$XDG_CACHE_HOME/millstream``, default ``~/.cache``), or ``$MILLSTREAM_DB_BENCH_CACHE``."""

TOOLS = "rocksdb-tools"
"""Debian's package of RocksDB's tools, ``db_bench`` among them."""

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
    if chosen := os.environ.get(ENVIRONMENT):
        return chosen, dict(os.environ)
    fetched = CACHE / "usr" / "bin" / "db_bench"
    if fetched.exists():
        return str(fetched), unpacked_libraries(CACHE)
    if found := shutil.which("db_bench"):
        return found, dict(os.environ)
    raise DbBenchMissingError(
        f"no db_bench: run `python -m benchmarks.engine_fill fetch` (Debian's {TOOLS}), install it, "
        f"or set {ENVIRONMENT}"
    )


def benchmark_of(fill: Fill) -> str:
    """The ``db_bench`` benchmark that writes ``fill``'s keys: each once, shuffled or in key order."""
    return "filluniquerandom" if fill.random_order else "fillseq"


def unpacked_libraries(cache: Path) -> dict[str, str]:
    """This process's environment with the libraries unpacked into ``cache`` first on ``LD_LIBRARY_PATH``: Debian's
    multiarch directory of whatever architecture the packages were for (``usr/lib/<triplet>``), and ``usr/lib``."""
    environment = dict(os.environ)
    lib = cache / "usr" / "lib"
    libraries = [str(path) for path in sorted(lib.glob("*-linux-gnu*")) if path.is_dir()] + [str(lib)]
    environment["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [*libraries, environment.get("LD_LIBRARY_PATH")]))
    return environment


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
    """Download Debian's ``rocksdb-tools`` and each package it needs that this system lacks (``apt-get download``, its
    dependencies followed: no root, Debian and Ubuntu alike) and unpack them into ``cache``; the path of
    ``db_bench``, checked to load. Done once: a cache holding it is kept; nothing with ``$MILLSTREAM_DB_BENCH`` set.
    """
    if chosen := os.environ.get(ENVIRONMENT):
        return Path(chosen)
    program = cache / "usr" / "bin" / "db_bench"
    if program.exists():
        return program
    if shutil.which("apt-get") is None:
        raise DbBenchMissingError(
            f"fetching db_bench needs apt-get (Debian, Ubuntu): install RocksDB's tools and set {ENVIRONMENT} to "
            "their db_bench"
        )
    downloads = cache / "debs"
    downloads.mkdir(parents=True, exist_ok=True)
    wanted, seen = [TOOLS], {TOOLS}
    while wanted:
        subprocess.run(["apt-get", "download", *wanted], cwd=downloads, check=True)
        depends = (depends_of(package) for package in downloads.glob("*.deb"))
        wanted = sorted({name for names in depends for name in names} - seen)
        seen.update(wanted)
        wanted = [name for name in wanted if not installed(name)]
    for package in sorted(downloads.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(package), str(cache)], check=True)
    _check_loads(program, cache)
    return program


def depends_of(package: Path) -> list[str]:
    """The packages a ``.deb`` depends on (the first of each set of alternatives, without versions)."""
    field = subprocess.run(["dpkg-deb", "-f", str(package), "Depends"], capture_output=True, text=True, check=True)
    return parse_depends(field.stdout)


def parse_depends(field: str) -> list[str]:
    """``libc6 (>= 2.34), libfoo1 | libbar1, libbaz:any`` → ``["libc6", "libfoo1", "libbaz"]``."""
    names = (part.split("|")[0].split("(")[0].strip().split(":")[0] for part in field.split(","))
    return [name for name in names if name]


def installed(package: str) -> bool:
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return status.returncode == 0 and status.stdout.strip() == "install ok installed"


def _check_loads(program: Path, cache: Path) -> None:
    """Raise ``DbBenchMissingError`` naming the libraries ``program`` cannot load from the system or ``cache``."""
    linked = subprocess.run(["ldd", str(program)], capture_output=True, text=True, env=unpacked_libraries(cache))
    missing = [line.split()[0] for line in linked.stdout.splitlines() if "not found" in line]
    if linked.returncode != 0 or missing:
        raise DbBenchMissingError(f"the fetched {program} cannot load {', '.join(missing) or linked.stderr}")


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m benchmarks.engine_fill fetch")
    print(fetch())
