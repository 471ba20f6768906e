"""A container's heartbeat: it beats on its own thread until stopped, and stops for good once a newer attempt
fenced it, so a replaced container never looks alive again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from millstream.contracts.coordination import (
    container_heartbeats,
    driver_heartbeat,
    publish_generation,
    record_driver_heartbeat,
    record_heartbeat,
    start_container_attempt,
)
from millstream.contracts.metadata import MetadataStore
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.runtime.heartbeat import ContainerHeartbeat, DriverHeartbeat, DriverWatch, UnbrokenChecks
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
        assert not checked_for(watch, clock, 7.5)
        record_driver_heartbeat(store, 1, beat)
        assert not checked_for(watch, clock, 0.5)
    assert not checked_for(watch, clock, 9.5), "not before the timeout"
    clock.now += 1
    assert watch.lost()
    assert watch.lost_reason is not None and "job.driver.liveness.timeout.ms=10000" in watch.lost_reason


def checked_for(watch: DriverWatch, clock: FakeClock, seconds: float) -> bool:
    """Let ``seconds`` pass, the container checking its driver every second as its loop does; lost at the end?"""
    end, lost = clock.now + seconds, False
    while clock.now < end:
        clock.now = min(clock.now + 1, end)
        lost = watch.lost()
    return lost


class WaitingStore:
    """The store, whose reads wait ``wait_s`` on the fake clock first: a Kafka coordinator stream, its broker out."""

    def __init__(self, store: SqliteMetadataStore, clock: FakeClock) -> None:
        self.store, self.clock, self.wait_s = store, clock, 0.0

    def get(self, namespace: str, key: str) -> bytes | None:
        self.clock.now += self.wait_s
        return self.store.get(namespace, key)


@pytest.mark.parametrize(
    ("wait_s", "then_s"),
    [
        (30, 9.5),  # a broker restart: the driver is not lost for it; its silence counts from the read's end
        (4, 5.5),  # a blip under half the timeout: the wait counts, so a driver that stopped meanwhile is found in time
    ],
    ids=["an-outage", "a-blip"],
)
def test_a_container_counts_its_drivers_silence_from_the_end_of_a_read_that_waited_out_the_store(
    store: SqliteMetadataStore, wait_s: float, then_s: float
) -> None:
    """A read waits ``wait_s`` for the store and finds the driver's heartbeat that old; ``then_s`` later the
    driver's silence is 9.5 s by the container's count, and lost one second after."""
    clock = FakeClock()
    waiting = WaitingStore(store, clock)
    watch = DriverWatch(cast(MetadataStore, waiting), 1, timeout_s=10, check_s=0, clock=clock)
    assert record_driver_heartbeat(store, 1, 1)
    assert not watch.lost()
    waiting.wait_s = wait_s
    assert not watch.lost()
    waiting.wait_s = 0
    assert not checked_for(watch, clock, then_s), "9.5 s of silence by the container's count"
    clock.now += 1
    assert watch.lost()


def test_checks_are_unbroken_from_the_end_of_the_first_one_after_a_gap() -> None:
    checks = UnbrokenChecks(gap_s=5)
    assert checks.succeeded(0.1) == 0.1, "from the first check"
    assert checks.succeeded(4.9) == 0.1, "a gap within gap_s: a check that waited a little, or a late one"
    assert checks.succeeded(20) == 20, "a check that waited out the store, or checks that failed: from its end"
    assert checks.succeeded(21) == 20


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
