"""A container's heartbeat: it beats on its own thread until stopped, and stops for good once a newer attempt
fenced it, so a replaced container never looks alive again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.metadata.coordination import (
    container_heartbeats,
    publish_generation,
    record_heartbeat,
    start_container_attempt,
)
from millstream.metadata.sqlite import SqliteMetadataStore
from millstream.runtime.heartbeat import ContainerHeartbeat
from tests.helpers import wait_until


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    publish_generation(store, 1)
    yield store
    store.close()


def test_a_heartbeat_beats_until_stopped_and_the_record_changes_at_every_beat(store: SqliteMetadataStore) -> None:
    epoch = start_container_attempt(store, "0")
    heartbeat = ContainerHeartbeat(store, "0", 1, epoch, 0.01).start()
    try:
        wait_until(lambda: container_heartbeats(store).get("0", {}).get("beat", 0) >= 3, 30, "three beats")
    finally:
        heartbeat.stop()
    assert not heartbeat.beating
    record = container_heartbeats(store)["0"]
    assert (record["generation"], record["attempt"]) == (1, epoch)
    assert record["beat"] == heartbeat.beats


def test_a_fenced_attempts_heartbeat_is_refused_and_its_thread_stops(store: SqliteMetadataStore) -> None:
    old = start_container_attempt(store, "0")
    heartbeat = ContainerHeartbeat(store, "0", 1, old, 0.01).start()
    wait_until(lambda: "0" in container_heartbeats(store), 30, "a first beat")
    live = start_container_attempt(store, "0")
    assert record_heartbeat(store, "0", 1, live, 1)
    wait_until(lambda: not heartbeat.beating, 30, "the fenced heartbeat to stop")
    assert container_heartbeats(store)["0"]["attempt"] == live
    assert not record_heartbeat(store, "0", 1, old, 99)
    heartbeat.stop()
