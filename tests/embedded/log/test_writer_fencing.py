"""The log refuses a superseded writer: once an attempt of a container (or a newer generation of the job)
appended to or claimed a partition, an older attempt's appends fail and append nothing, and its producer
stays fenced — later sends and flushes raise, and what it buffered is never written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition

from .conftest import create, envelope, ssp


def attempt(epoch: int, generation: int = 1, container: str = "0", job: str = "job-1") -> WriterToken:
    return WriterToken(job, container, generation, epoch)


def append(log: LogPartition, writer: WriterToken, *values: bytes) -> int:
    return log.append_columns([1_000] * len(values), None, list(values), None, writer)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[LogPartition]:
    partition = LogPartition(tmp_path / "p0.db", "changelog", 0, create=True)
    yield partition
    partition.close()


def test_an_older_attempt_of_the_container_cannot_append_after_a_newer_one_did(log: LogPartition) -> None:
    append(log, attempt(1), b"a")
    append(log, attempt(2), b"b")
    with pytest.raises(WriterFencedError, match=r"attempt 2 of generation 1 of the container writes here now"):
        append(log, attempt(1), b"stale")
    assert log.state().upcoming == 2


def test_a_claim_fences_older_attempts_without_appending(log: LogPartition) -> None:
    append(log, attempt(1), b"a")
    log.claim(attempt(2))
    with pytest.raises(WriterFencedError, match="container 0 attempt 1 of generation 1 of job job-1 was fenced"):
        append(log, attempt(1), b"stale")
    assert log.state().upcoming == 1
    with pytest.raises(WriterFencedError):
        log.claim(attempt(1))


def test_any_container_of_an_older_generation_is_fenced_but_other_containers_and_jobs_are_not(
    log: LogPartition,
) -> None:
    append(log, attempt(5, generation=1, container="0"), b"a")
    append(log, attempt(1, generation=1, container="1"), b"b")  # another container of the same generation
    append(log, attempt(1, generation=2, container="1"), b"c")  # the task moved to container 1 in generation 2
    with pytest.raises(WriterFencedError, match="generation 2 of the job writes here now"):
        append(log, attempt(5, generation=1, container="0"), b"stale")
    append(log, attempt(1, generation=1, container="0", job="other-1"), b"d")  # another job is not fenced
    append(log, attempt(6, generation=2, container="0"), b"e")
    assert log.state().upcoming == 5


def test_appends_without_a_writer_are_never_fenced(log: LogPartition) -> None:
    log.claim(attempt(3))
    assert log.append([(1_000, None, b"external", None)]) == 0


def test_a_fenced_producer_raises_at_every_later_send_and_flush_and_drops_what_it_buffered(
    admin: LogSystemAdmin,
) -> None:
    create(admin, "changelog")
    zombie, current = LogSystemProducer("log", admin.layout), LogSystemProducer("log", admin.layout)
    zombie.set_writer(attempt(1))
    current.set_writer(attempt(2))
    zombie.send("task", envelope("changelog", b"before"))
    zombie.flush("task")
    zombie.send("task", envelope("changelog", b"stale"))
    current.claim(ssp("changelog"))
    with pytest.raises(WriterFencedError):
        zombie.flush("task")
    with pytest.raises(WriterFencedError):
        zombie.send("task", envelope("changelog", b"later"))
    zombie.stop()  # drops the buffer instead of appending it
    current.send("task", envelope("changelog", b"current"))
    current.stop()
    written = LogPartition(admin.layout.partition_path("changelog", 0), "changelog", 0).read(0, 10)
    assert written is not None and written.values == [b"before", b"current"]


def test_a_zombie_that_appended_before_is_fenced_by_a_claim_made_through_another_connection(tmp_path: Path) -> None:
    zombie = LogPartition(tmp_path / "p0.db", "changelog", 0, create=True)
    successor = LogPartition(tmp_path / "p0.db", "changelog", 0)
    append(zombie, attempt(1), b"a")
    append(zombie, attempt(1), b"b")  # the partition ends where this connection left it
    successor.claim(attempt(2))  # which a claim does not move
    with pytest.raises(WriterFencedError, match="attempt 2 of generation 1 of the container writes here now"):
        append(zombie, attempt(1), b"stale")
    successor.claim(attempt(1, generation=2, container="1"))
    with pytest.raises(WriterFencedError, match="generation 2 of the job writes here now"):
        append(successor, attempt(2), b"stale")
    assert zombie.state().upcoming == 2
    assert append(successor, attempt(1, generation=2, container="1"), b"c") == 2
    zombie.close()
    successor.close()
