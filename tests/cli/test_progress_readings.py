"""The progress line's figures: positions moved, counts across restarts, a rate that moves with the figure,
and one line per container restart naming its cause."""

from __future__ import annotations

from millstream.cli.progress_readings import ProcessedCount, Rate, RestartWatch, moved_positions
from millstream.contracts.metrics import Sample
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


def status(generation: int, attempt: int, restarts: int = 0, cause: str | None = None) -> dict[str, object]:
    return {"generation": generation, "attempt": attempt, "state": "running", "restarts": restarts,
            **({"restart-cause": cause} if cause else {})}  # fmt: skip


def test_a_restart_is_one_line_with_the_cause_the_new_attempt_recorded() -> None:
    watch = RestartWatch()
    assert watch.lines({"0": status(1, 1), "1": status(1, 1)}) == []
    assert watch.lines({"0": status(1, 2, 1, "attempt 1 failed: ValueError: bad at 7"), "1": status(1, 1)}) == [
        "container 0 restarted (attempt 2): attempt 1 failed: ValueError: bad at 7"
    ]
    assert watch.lines({"0": status(1, 2, 1, "attempt 1 failed: ValueError: bad at 7")}) == [], "said once"


def test_a_restart_the_readings_saw_only_after_it_happened_is_still_said() -> None:
    """The first reading may come after the container's first attempt failed and its second started."""
    assert RestartWatch().lines({"0": status(1, 2, 1, "attempt 1 ended without reporting a cause")}) == [
        "container 0 restarted (attempt 2): attempt 1 ended without reporting a cause"
    ]


def test_a_new_generation_counts_its_restarts_anew() -> None:
    watch = RestartWatch()
    watch.lines({"0": status(1, 3, 2, "x")})
    assert watch.lines({"0": status(2, 4)}) == [], "a new generation's first attempt is no restart"
    assert watch.lines({"0": status(2, 5, 1, "attempt 4 failed: E")}) == [
        "container 0 restarted (attempt 5): attempt 4 failed: E"
    ]
