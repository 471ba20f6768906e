"""Coordination records: the published generation, container epochs, the stop signal and container
statuses, as the coordinator and the containers share them through the metadata store."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from millstream.contracts.coordination import (
    CONTAINER_EPOCH_NAMESPACE,
    CONTAINER_STATUS_NAMESPACE,
    CoordinationRecordError,
    clear_stop,
    container_epoch,
    container_statuses,
    current_generation,
    generation_started,
    publish_generation,
    report_container_status,
    request_stop,
    start_container_attempt,
    stop_requested,
    superseded_message,
    writer_expectation,
)
from millstream.contracts.metadata import FencedError
from millstream.embedded.sqlite import SqliteMetadataStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    yield store
    store.close()


def test_current_generation_is_zero_before_any_is_published(store: SqliteMetadataStore) -> None:
    assert current_generation(store) == 0


def test_published_generation_is_stored_as_decimal_text(store: SqliteMetadataStore) -> None:
    publish_generation(store, 3)
    assert current_generation(store) == 3
    assert store.get("job-coordinator", "generation") == b"3"


def test_publishing_a_newer_generation_replaces_the_current_one(store: SqliteMetadataStore) -> None:
    publish_generation(store, 1)
    publish_generation(store, 2)
    publish_generation(store, 2)
    assert current_generation(store) == 2


def test_publishing_an_older_generation_is_refused(store: SqliteMetadataStore) -> None:
    publish_generation(store, 5)
    with pytest.raises(FencedError, match=r"generation 4.*generation 5"):
        publish_generation(store, 4)
    assert current_generation(store) == 5


def test_publishing_a_generation_records_when_it_started_so_a_superseded_run_can_name_it(
    store: SqliteMetadataStore,
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    publish_generation(store, 1)
    publish_generation(store, 2)
    after = datetime.now(UTC)
    started = generation_started(store, 2)
    assert started is not None and started.endswith("Z")
    assert before <= datetime.fromisoformat(started.replace("Z", "+00:00")) <= after
    publish_generation(store, 2)  # republishing the current generation does not move its start
    assert generation_started(store, 2) == started
    assert superseded_message(store, 1, 2) == f"generation 1 was superseded by generation 2 started at {started}"
    assert superseded_message(store, 1, 7) == "generation 1 was superseded by generation 7 started at an unknown time"


def test_a_corrupt_generation_record_is_reported_by_name(store: SqliteMetadataStore) -> None:
    store.put("job-coordinator", "generation", b"not-a-number")
    with pytest.raises(CoordinationRecordError, match="job-coordinator/generation"):
        current_generation(store)


def test_first_container_attempt_has_epoch_one_and_each_next_attempt_increments(store: SqliteMetadataStore) -> None:
    assert container_epoch(store, "c0") == 0
    assert start_container_attempt(store, "c0") == 1
    assert start_container_attempt(store, "c0") == 2
    assert start_container_attempt(store, "c1") == 1
    assert container_epoch(store, "c0") == 2
    assert store.get(CONTAINER_EPOCH_NAMESPACE, "c0") == b"2"


def _start_attempts(store: SqliteMetadataStore, count: int, results: multiprocessing.Queue) -> None:
    results.put([start_container_attempt(store, "c0") for _ in range(count)])
    store.close()


def test_concurrent_attempts_from_several_processes_get_distinct_epochs(store: SqliteMetadataStore) -> None:
    store.init()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_start_attempts, args=(store, 25, results)) for _ in range(3)]
    for process in processes:
        process.start()
    epochs = [epoch for _ in processes for epoch in results.get(timeout=60)]
    for process in processes:
        process.join(timeout=60)
    assert sorted(epochs) == list(range(1, 76))


def test_writer_expectation_names_generation_and_container_epoch() -> None:
    assert writer_expectation(4, "c2", 7) == {
        ("job-coordinator", "generation"): b"4",
        ("container-epoch", "c2"): b"7",
    }


def test_a_new_attempt_fences_the_previous_attempts_writes(store: SqliteMetadataStore) -> None:
    publish_generation(store, 1)
    first = start_container_attempt(store, "c0")
    assert store.compare_and_put("data", "k", b"first", writer_expectation(1, "c0", first))
    second = start_container_attempt(store, "c0")
    assert not store.compare_and_put("data", "k", b"zombie", writer_expectation(1, "c0", first))
    assert store.compare_and_put("data", "k", b"second", writer_expectation(1, "c0", second))
    assert store.get("data", "k") == b"second"


def test_no_stop_is_requested_initially(store: SqliteMetadataStore) -> None:
    assert not stop_requested(store, 1)


def test_stop_for_a_generation_applies_to_it_and_older_generations_only(store: SqliteMetadataStore) -> None:
    request_stop(store, 3)
    assert stop_requested(store, 2)
    assert stop_requested(store, 3)
    assert not stop_requested(store, 4)


def test_a_stop_request_for_an_older_generation_never_narrows_a_newer_one(store: SqliteMetadataStore) -> None:
    request_stop(store, 5)
    request_stop(store, 2)
    assert stop_requested(store, 5)
    request_stop(store, 6)
    assert stop_requested(store, 6)


def test_clear_stop_withdraws_the_request(store: SqliteMetadataStore) -> None:
    request_stop(store, 3)
    clear_stop(store)
    assert not stop_requested(store, 1)
    clear_stop(store)


def _attempt(store: SqliteMetadataStore, container_id: str, generation: int = 1) -> int:
    """Publish ``generation`` (if newer) and start an attempt of ``container_id``: its status writes' fence."""
    if current_generation(store) < generation:
        publish_generation(store, generation)
    return start_container_attempt(store, container_id)


def test_container_status_round_trips_with_pid_host_and_update_time(store: SqliteMetadataStore) -> None:
    c0, c1 = _attempt(store, "c0"), _attempt(store, "c1")
    assert report_container_status(store, "c0", 1, c0, {"state": "running", "executor": {"id": "1"}})
    assert report_container_status(store, "c1", 1, c1, {"state": "starting", "pid": 42, "host": "h1"})
    statuses = container_statuses(store)
    assert set(statuses) == {"c0", "c1"}
    assert statuses["c0"]["state"] == "running"
    assert statuses["c0"]["executor"] == {"id": "1"}
    assert statuses["c0"]["attempt"] == 1 and statuses["c0"]["generation"] == 1
    assert isinstance(statuses["c0"]["pid"], int)
    assert isinstance(statuses["c0"]["host"], str)
    assert statuses["c0"]["updated-at"] > 1_600_000_000_000
    assert statuses["c1"]["pid"] == 42
    assert statuses["c1"]["host"] == "h1"


def test_a_later_status_report_replaces_the_earlier_one(store: SqliteMetadataStore) -> None:
    epoch = _attempt(store, "c0")
    report_container_status(store, "c0", 1, epoch, {"state": "running"})
    report_container_status(store, "c0", 1, epoch, {"state": "stopped"})
    assert container_statuses(store)["c0"]["state"] == "stopped"


def test_a_fenced_attempts_late_status_never_replaces_the_live_attempts(store: SqliteMetadataStore) -> None:
    """The partition case: attempt 1 on h4 is cut off, attempt 2 starts on h3 and reports; attempt 1's last
    report ("failed") arrives afterwards and must be refused, leaving attempt 2's record."""
    old = _attempt(store, "c0")
    assert report_container_status(store, "c0", 1, old, {"state": "running", "host": "h4"})
    live = _attempt(store, "c0")
    assert report_container_status(store, "c0", 1, live, {"state": "running", "host": "h3"})
    assert not report_container_status(store, "c0", 1, old, {"state": "failed", "host": "h4", "error": "cut off"})
    assert not report_container_status(store, "c0", 1, old, {"state": "superseded"}, handing_over=True)
    status = container_statuses(store)["c0"]
    assert (status["state"], status["host"], status["attempt"]) == ("running", "h3", live)


def test_an_older_generations_status_is_refused_unless_it_hands_over_before_a_newer_attempt(
    store: SqliteMetadataStore,
) -> None:
    old = _attempt(store, "c0")
    publish_generation(store, 2)
    assert not report_container_status(store, "c0", 1, old, {"state": "running"})
    assert report_container_status(store, "c0", 1, old, {"state": "superseded"}, handing_over=True)
    assert container_statuses(store)["c0"]["state"] == "superseded"
    live = _attempt(store, "c0", generation=2)
    assert report_container_status(store, "c0", 2, live, {"state": "starting"})
    assert not report_container_status(store, "c0", 1, old, {"state": "superseded"}, handing_over=True)
    status = container_statuses(store)["c0"]
    assert (status["state"], status["generation"], status["attempt"]) == ("starting", 2, live)


def test_status_record_is_json(store: SqliteMetadataStore) -> None:
    report_container_status(store, "c0", 1, _attempt(store, "c0"), {"state": "running"})
    raw = store.get(CONTAINER_STATUS_NAMESPACE, "c0")
    assert raw is not None
    assert orjson.loads(raw)["state"] == "running"


def test_an_unreadable_status_record_is_skipped_not_fatal(store: SqliteMetadataStore) -> None:
    report_container_status(store, "c0", 1, _attempt(store, "c0"), {"state": "running"})
    store.put(CONTAINER_STATUS_NAMESPACE, "c1", b"{broken")
    store.put(CONTAINER_STATUS_NAMESPACE, "c2", b"[1, 2]")
    assert set(container_statuses(store)) == {"c0"}
