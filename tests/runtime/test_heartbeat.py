"""A container's heartbeat: it beats on its own thread until stopped, and stops for good once a newer attempt
fenced it, so a replaced container never looks alive again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.contracts.coordination import (
    container_heartbeats,
    driver_heartbeat,
    publish_generation,
    record_driver_heartbeat,
    record_heartbeat,
    start_container_attempt,
)
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.runtime.heartbeat import ContainerHeartbeat, DriverHeartbeat, DriverWatch
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_drivers_heartbeat_beats_until_its_run_ends_then_says_it_ended(store: SqliteMetadataStore) -> None:
    heartbeat = DriverHeartbeat(store, 1, 0.01).start()
    wait_until(lambda: (driver_heartbeat(store) or {}).get("beat", 0) >= 3, 30, "three driver beats")
    heartbeat.end()
    record = driver_heartbeat(store)
    assert record is not None and (record["generation"], record["ended"]) == (1, True)
    assert not heartbeat.beating


def test_a_newer_generation_refuses_the_old_drivers_heartbeat(store: SqliteMetadataStore) -> None:
    publish_generation(store, 2)
    assert not record_driver_heartbeat(store, 1, 1)
    assert driver_heartbeat(store) is None


def test_a_container_finds_its_driver_lost_once_the_heartbeat_stood_still_for_the_timeout(
    store: SqliteMetadataStore,
) -> None:
    clock = FakeClock()
    watch = DriverWatch(store, 1, timeout_s=10, check_s=1, clock=clock)
    assert record_driver_heartbeat(store, 1, 1)
    assert not watch.lost()
    for beat in (2, 3):  # beating: never lost, however long the run
        clock.now += 8
        record_driver_heartbeat(store, 1, beat)
        assert not watch.lost()
    clock.now += 9.5
    assert not watch.lost(), "not before the timeout"
    clock.now += 1
    assert watch.lost()
    assert watch.lost_reason is not None and "job.driver.liveness.timeout.ms=10000" in watch.lost_reason


def test_a_container_whose_driver_ended_the_run_stops_at_once(store: SqliteMetadataStore) -> None:
    watch = DriverWatch(store, 1, timeout_s=60, check_s=0, clock=FakeClock())
    record_driver_heartbeat(store, 1, 5, ended=True)
    assert watch.lost() and watch.lost_reason is not None and "ended the run" in watch.lost_reason


def test_a_generation_no_driver_beat_for_is_never_judged(store: SqliteMetadataStore) -> None:
    clock = FakeClock()
    watch = DriverWatch(store, 1, timeout_s=1, check_s=0, clock=clock)
    clock.now += 100
    assert not watch.lost(), "a container started by a tool or a test, without a runner"
    publish_generation(store, 2)
    record_driver_heartbeat(store, 2, 1)
    clock.now += 100
    assert not watch.lost(), "another generation's driver is not this container's"
