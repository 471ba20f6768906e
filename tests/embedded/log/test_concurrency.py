"""Several processes on the same log at once: no corruption, no lost writes, no duplicate offsets.

Processes are started with ``spawn`` so each opens its own SQLite connections, as Spark executors do.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from multiprocessing.synchronize import Barrier
from pathlib import Path

import msgpack
import pytest

from millstream.contracts.systems import StreamSpec
from millstream.embedded.log import storage
from millstream.embedded.log.factory import LogSystemFactory

from .conftest import SYSTEM, create, envelope, log_config, ssp, stored_batches

WRITERS = 4
PER_WRITER = 1500
PRODUCER_BATCH = 37


def _write(root: str, writer: int, barrier: Barrier, segment_bytes: int | None, padding: int) -> None:
    if segment_bytes is not None:
        storage.SEGMENT_BYTES = segment_bytes  # this process's own module: spawned, not forked
    producer = LogSystemFactory().get_producer(SYSTEM, log_config(Path(root), producer__batch__size=PRODUCER_BATCH))
    barrier.wait()
    for sequence in range(PER_WRITER):
        value = f"{writer}:{sequence}:".encode() + b"." * padding
        producer.send("task", envelope("shared", value, partition=0))
        if sequence % 200 == 0:
            producer.flush("task")
    producer.stop()


def _create(root: str, barrier: Barrier, results: multiprocessing.Queue) -> None:
    admin = LogSystemFactory().get_admin(SYSTEM, log_config(Path(root)))
    barrier.wait()
    results.put(admin.create_stream(StreamSpec(SYSTEM, "raced", 3)))


@pytest.mark.parametrize(
    ("segment_bytes", "padding"),
    [(None, 0), (65_536, 1_000)],
    ids=["one segment", "a new segment every 64 KiB"],
)
def test_four_writer_processes_and_a_reader_share_a_partition_without_loss_or_duplicates(
    root: Path, segment_bytes: int | None, padding: int
) -> None:
    config = log_config(root, poll__batch__size=100)
    create(LogSystemFactory().get_admin(SYSTEM, config), "shared")
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITERS + 1)
    writers = [
        context.Process(target=_write, args=(str(root), w, barrier, segment_bytes, padding)) for w in range(WRITERS)
    ]
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
            writer, sequence = map(int, received.message.decode().split(":")[:2])
            assert sequence == next_sequence[writer], "a writer's records were lost, duplicated or reordered"
            next_sequence[writer] += 1
            offsets.append(int(received.offset))
    for process in writers:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert consumer.poll({ssp("shared")}, 0) == {}
    segments = len(list((root / "shared").glob("p0-*.seg")))
    if segment_bytes is None:
        assert segments == 1
    else:  # no segment holds more than segment_bytes: the writers rolled them between each other's appends
        assert segments >= total * padding / segment_bytes
    consumer.stop()
    assert next_sequence == [PER_WRITER] * WRITERS
    assert offsets == list(range(total))
    stored = stored_batches(root / "shared" / "p0.db")
    with sqlite3.connect(root / "shared" / "p0.db") as connection:
        assert [(base, end) for base, end, _, _ in stored] == list(
            zip([0] + [end for _, end, _, _ in stored[:-1]], [end for _, end, _, _ in stored], strict=True)
        ), "the batches do not tile the offsets without gaps or overlaps"
        assert all(end - base == count == len(msgpack.unpackb(payload)[2]) for base, end, count, payload in stored)
        assert stored[-1][1] == total
        assert max(count for _, _, count, _ in stored) <= PRODUCER_BATCH, "appends were merged into one batch"
        assert connection.execute("SELECT next_offset FROM meta").fetchone() == (total,)
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    connection.close()


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
