"""The failure records through which a failure of user code that repeats is found deterministic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.coordination import (
    clear_failures,
    container_failures,
    deterministic_failure,
    publish_generation,
    record_container_failure,
    record_deterministic_failure,
    start_container_attempt,
)
from millstream.contracts.metadata import FencedError
from millstream.embedded.sqlite import SqliteMetadataStore

AT_3 = {"task": "Partition 0", "stream": "log.in", "partition": 0, "offset": "3", "type": "ValueError", "digest": "a"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    publish_generation(store, 1)
    yield store
    store.close()


def test_the_same_failure_in_successive_attempts_is_counted_up(store: SqliteMetadataStore) -> None:
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3) == 1
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3) == 2
    record = container_failures(store)["0"]
    assert record["offset"] == "3" and record["attempt"] == 2 and record["count"] == 2


def test_a_failure_at_another_offset_or_of_another_type_is_counted_apart(store: SqliteMetadataStore) -> None:
    record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3)
    other_offset = {**AT_3, "offset": "4"}
    other_type = {**AT_3, "type": "KeyError"}
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), other_offset) == 1
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), other_type) == 1
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3) == 2


def test_the_digest_alone_does_not_make_a_different_failure(store: SqliteMetadataStore) -> None:
    record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3)
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), {**AT_3, "digest": "b"}) == 2


def test_a_zombie_attempt_cannot_record_a_failure(store: SqliteMetadataStore) -> None:
    zombie = start_container_attempt(store, "0")
    start_container_attempt(store, "0")
    with pytest.raises(FencedError):
        record_container_failure(store, "0", 1, zombie, AT_3)
    assert not record_deterministic_failure(store, "0", 1, zombie, "boom")
    assert deterministic_failure(store, 1) is None


def test_a_deterministic_failure_belongs_to_its_generation_only(store: SqliteMetadataStore) -> None:
    assert record_deterministic_failure(store, "0", 1, start_container_attempt(store, "0"), "boom")
    assert deterministic_failure(store, 1) == "boom"
    publish_generation(store, 2)
    assert deterministic_failure(store, 2) is None


def test_a_newer_generation_counts_failures_from_one_again(store: SqliteMetadataStore) -> None:
    record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3)
    publish_generation(store, 2)
    assert record_container_failure(store, "0", 2, start_container_attempt(store, "0"), AT_3) == 1


def test_clearing_forgets_every_failure_record(store: SqliteMetadataStore) -> None:
    epoch = start_container_attempt(store, "0")
    record_container_failure(store, "0", 1, epoch, AT_3)
    record_deterministic_failure(store, "0", 1, epoch, "boom")
    clear_failures(store)
    assert container_failures(store) == {} and deterministic_failure(store, 1) is None


def test_an_unreadable_failure_record_counts_as_none(store: SqliteMetadataStore) -> None:
    store.put("failures", "0", b"{not json")
    store.put("job-coordinator", "failed", b"[]")
    assert deterministic_failure(store, 1) is None
    assert record_container_failure(store, "0", 1, start_container_attempt(store, "0"), AT_3) == 1
