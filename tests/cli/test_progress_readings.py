"""The progress line's figures: positions moved, counts across restarts, a rate that moves with the figure,
and one line per container restart naming its cause."""

from __future__ import annotations

from millstream.cli.progress_readings import ProcessedCount, Rate, RestartWatch, moved_positions
from millstream.metrics.registry import Sample
from millstream.model import SystemStreamPartition

P0 = SystemStreamPartition("log", "in", 0)
P1 = SystemStreamPartition("log", "in", 1)


def sample(name: str, ssp: SystemStreamPartition, value: float, task: str = "Partition 0") -> Sample:
    labels = (("partition", str(ssp.partition)), ("stream", ssp.stream), ("system", ssp.system), ("task", task))
    return Sample(name, "gauge" if name == "lag" else "counter", labels, value)


def test_a_bounded_jobs_progress_is_how_far_each_partitions_lag_fell_since_the_start() -> None:
    samples = [sample("lag", P0, 400), sample("lag", P1, 1000), sample("processed", P0, 7)]
    assert moved_positions({P0: 1000, P1: 1000}, samples) == 600


def test_a_partition_not_reported_yet_or_re_read_after_a_restart_counts_nothing_not_less_than_nothing() -> None:
    assert moved_positions({P0: 100, P1: 100}, [sample("lag", P0, 120)]) == 0


def test_a_counter_that_goes_back_is_a_new_attempt_counting_from_zero_so_the_count_keeps_growing() -> None:
    count = ProcessedCount()
    assert count.add([sample("processed", P0, 300), sample("processed", P1, 100)]) == 400
    assert count.add([sample("processed", P0, 300), sample("processed", P1, 100)]) == 400  # the same snapshot again
    assert count.add([sample("processed", P0, 20), sample("processed", P1, 150)]) == 470  # container of P0 restarted


def test_the_rate_is_taken_between_readings_that_moved_the_figure_not_at_every_poll() -> None:
    rate = Rate(stale_after=15)
    assert rate.reading(100.0, 0) is None
    assert rate.reading(105.0, 5000) == 1000
    assert rate.reading(106.0, 5000) == 1000, "a poll between two reports is no evidence of a stall"
    assert rate.reading(110.0, 7500) == 500


def test_the_rate_falls_to_zero_once_nothing_moved_for_the_stale_time() -> None:
    rate = Rate(stale_after=15)
    rate.reading(0.0, 0)
    rate.reading(5.0, 100)
    assert rate.reading(19.0, 100) == 20
    assert rate.reading(20.0, 100) == 0


def status(generation: int, attempt: int, state: str, error: str | None = None) -> dict[str, object]:
    return {"generation": generation, "attempt": attempt, "state": state, **({"error": error} if error else {})}


def test_a_new_attempt_after_a_failed_one_is_one_line_with_the_failures_first_line() -> None:
    watch = RestartWatch()
    assert watch.lines({"0": status(1, 1, "running"), "1": status(1, 1, "running")}) == []
    assert (
        watch.lines({"0": status(1, 1, "failed", "ValueError: bad at 7\nTraceback ..."), "1": status(1, 1, "running")})
        == []
    )
    assert watch.lines({"0": status(1, 2, "starting"), "1": status(1, 1, "running")}) == [
        "container 0 restarted (attempt 2): attempt 1 failed: ValueError: bad at 7"
    ]
    assert watch.lines({"0": status(1, 2, "running"), "1": status(1, 1, "running")}) == [], "said once"


def test_a_new_attempt_whose_predecessor_said_nothing_was_killed_or_lost() -> None:
    watch = RestartWatch()
    watch.lines({"0": status(1, 1, "running")})
    assert watch.lines({"0": status(1, 3, "running")}) == [
        "container 0 restarted (attempt 3): attempt 1 ended without reporting a cause (killed, or its host lost)"
    ]


def test_a_new_generation_is_not_a_container_restart() -> None:
    watch = RestartWatch()
    watch.lines({"0": status(1, 1, "superseded")})
    assert watch.lines({"0": status(2, 1, "running")}) == []


def test_a_failure_the_readings_missed_is_named_from_the_containers_failure_record() -> None:
    watch = RestartWatch()
    watch.lines({"0": status(1, 1, "running")})
    record = {"task": "Partition 0", "stream": "log.in", "partition": 0, "offset": "150", "type": "ValueError"}
    records = {"0": {**record, "generation": 1, "attempt": 1}}
    assert watch.lines({"0": status(1, 2, "starting")}, records.get) == [
        "container 0 restarted (attempt 2): attempt 1 failed: ValueError in task 'Partition 0' at log.in partition 0 "
        "offset 150"
    ]


def test_a_failure_record_of_another_attempt_is_not_taken_for_the_cause() -> None:
    watch = RestartWatch()
    watch.lines({"0": status(1, 2, "running")})
    records = {"0": {"task": "Partition 0", "type": "ValueError", "generation": 1, "attempt": 1}}
    assert "without reporting a cause" in watch.lines({"0": status(1, 3, "starting")}, records.get)[0]
