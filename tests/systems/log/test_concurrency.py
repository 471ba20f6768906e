"""Several processes on the same log at once: no corruption, no lost writes, no duplicate offsets.

Processes are started with ``spawn`` so each opens its own SQLite connections, as Spark executors do.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from multiprocessing.synchronize import Barrier
from pathlib import Path

from millstream.systems.base import StreamSpec
from millstream.systems.log.factory import LogSystemFactory

from .conftest import SYSTEM, create, envelope, log_config, ssp

WRITERS = 4
PER_WRITER = 1500


def _write(root: str, writer: int, barrier: Barrier) -> None:
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(Path(root), producer__batch__size=37))
    barrier.wait()
    for sequence in range(PER_WRITER):
        producer.send("task", envelope("shared", f"{writer}:{sequence}".encode(), partition=0))
        if sequence % 200 == 0:
            producer.flush("task")
    producer.stop()


def _create(root: str, barrier: Barrier, results: multiprocessing.Queue) -> None:
    admin = LogSystemFactory().get_admin(SYSTEM, log_config(Path(root)))
    barrier.wait()
    results.put(admin.create_stream(StreamSpec(SYSTEM, "raced", 3)))


def test_four_writer_processes_and_a_reader_share_a_partition_without_loss_or_duplicates(root: Path) -> None:
    config = log_config(root, poll__batch__size=100)
    create(LogSystemFactory().get_admin(SYSTEM, config), "shared")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS + 1)
    writers = [context.Process(target=_write, args=(str(root), w, barrier)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    consumer = LogSystemFactory().get_consumer(SYSTEM, config)
    consumer.register(ssp("shared"), "0")
    consumer.start()
    barrier.wait(timeout=60)
    next_sequence = [0] * WRITERS
    offsets: list[int] = []
    total = WRITERS * PER_WRITER
    while len(offsets) < total:
        batch = consumer.poll({ssp("shared")}, 5.0).get(ssp("shared"))
        assert batch, f"reader stalled after {len(offsets)} of {total} records"
        for received in batch:
            writer, sequence = map(int, received.message.decode().split(":"))
            assert sequence == next_sequence[writer], "a writer's records were lost, duplicated or reordered"
            next_sequence[writer] += 1
            offsets.append(int(received.offset))
    for process in writers:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert consumer.poll({ssp("shared")}, 0) == {}
    consumer.stop()
    assert next_sequence == [PER_WRITER] * WRITERS
    assert offsets == list(range(total))
    with sqlite3.connect(root / "shared" / "p0.db") as connection:
        stored = [row[0] for row in connection.execute('SELECT "offset" FROM records ORDER BY "offset"')]
        assert stored == list(range(total))
        assert connection.execute("SELECT next_offset FROM meta").fetchone() == (total,)
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_processes_racing_to_create_a_stream_end_with_one_stream_and_one_winner(root: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    results = context.Queue()
    creators = [context.Process(target=_create, args=(str(root), barrier, results)) for _ in range(3)]
    for process in creators:
        process.start()
    outcomes = sorted(results.get(timeout=60) for _ in creators)
    for process in creators:
        process.join(timeout=60)
    assert outcomes == [False, False, True]
    assert [path.name for path in root.iterdir()] == ["raced"]
    assert sorted(path.name for path in (root / "raced").iterdir()) == ["p0.db", "p1.db", "p2.db", "stream.json"]
