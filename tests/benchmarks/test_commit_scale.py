"""``benchmarks.commit_scale`` measures real commits of every task, and its table compares rows with 100 tasks."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from benchmarks.call_count import CallCounter
from benchmarks.commit_scale import Measured, job_config, measure, median_of, table
from millstream.config.views import StoreConfig


def test_a_measurement_commits_every_task_in_every_round_and_times_start_up(tmp_path):
    row = measure(tmp_path, tasks=3, rounds=2, system="log", bootstrap=None)  # raises when a commit is missing
    assert row.tasks == 3 and row.startup_seconds > 0 and row.startup_cpu > 0 and row.commit_cpu > 0
    assert row.commit_seconds > 0 and row.idle_seconds > 0 and row.idle_cpu >= 0
    assert row.batches is not None and 1 <= row.batches <= 3, "the group commit wrote each round in 1 to 3 batches"
    assert row.first_commit_cpu is not None and row.first_commit_cpu > 0


def test_a_container_can_commit_some_of_its_tasks_each_round_and_the_rest_stay_idle(tmp_path):
    row = measure(tmp_path, tasks=4, rounds=2, system="log", bootstrap=None, committing=1)
    assert row.tasks == 4 and row.committing == 1 and row.commit_cpu > 0
    per_task = table([row]).splitlines()[2].split("|")[7].strip()
    assert float(per_task) == round(row.commit_cpu * 1000, 2), "per committing task, not per task of the container"


def test_the_commit_round_is_the_median_of_the_rounds_after_the_first_which_is_shown_alone(tmp_path):
    """The first round also makes every store's local checkpoint; in a median of three rounds it pushed the figure
    to the dearer of the other two."""
    row = measure(tmp_path, tasks=2, rounds=3, system="log", bootstrap=None, local_checkpoint_ms=3_600_000)
    assert row.first_commit_cpu is not None
    assert row.first_commit_cpu > row.commit_cpu, "the first round's flushes and checkpoint directories cost more"


def test_the_table_gives_each_rows_cpu_as_a_ratio_of_the_100_task_rows():
    """CPU, not wall time: on a shared machine wall time moves with the load of others."""
    rows = [
        Measured(10, 1.0, 0.5, 0.1, 0.2, 0.001, 0.002),
        Measured(100, 4.0, 2.0, 1.0, 2.0, 0.01, 0.02),
        Measured(1000, 60.0, 16.0, 9.5, 20.0, 0.04, 0.08),
    ]
    rows[1].first_commit_cpu, rows[2].first_commit_cpu = 4.0, 36.0
    lines = table(rows).splitlines()
    first, last = lines[2].split("|"), lines[4].split("|")
    assert first[4].strip() == "0.25x" and first[8].strip() == "0.10x" and first[11].strip() == "0.10x"
    assert last[4].strip() == "8.00x" and last[8].strip() == "9.50x" and last[11].strip() == "4.00x"
    assert first[14].strip() == "-" and last[14].strip() == "9.00x"


def test_repeated_measurements_of_a_task_count_are_shown_as_each_figures_median():
    runs = [
        Measured(100, 4.0, 2.0, 1.0, 2.0, 0.01, 0.02, 3),
        Measured(100, 9.0, 5.0, 0.5, 1.0, 0.03, 0.01, None),
        Measured(100, 5.0, 3.0, 2.0, 4.0, 0.02, 0.03, 5),
    ]
    assert median_of(runs) == Measured(100, 5.0, 3.0, 1.0, 2.0, 0.02, 0.02, 4)


def test_counting_calls_gives_start_up_and_commit_calls_and_a_table_of_them_per_task_against_100(tmp_path: Path):
    row = measure(tmp_path, tasks=2, rounds=1, system="log", bootstrap=None, calls=True)
    assert row.startup_calls is not None and row.startup_calls > 1_000
    assert row.commit_calls is not None and row.commit_calls > 100
    assert row.first_commit_calls is not None and row.first_commit_calls > 100
    rows = [
        Measured(100, 1, 1, 1, 1, 0, 0, None, 200_000, 100_000, 150_000),
        Measured(1000, 1, 1, 1, 1, 0, 0, None, 2e6, 1.2e6, 3e6),
    ]
    last = table(rows).splitlines()[-1].split("|")
    assert [cell.strip() for cell in last[2:8]] == ["2,000", "10.00x", "1,200", "12.00x", "3,000", "20.00x"]


def test_the_call_counter_counts_calls_of_threads_started_while_it_is_active():
    def work() -> None:
        for value in range(1_000):
            str.upper(str(value))

    with CallCounter() as counter:
        before = counter.calls()
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        counted = counter.calls() - before
    assert counted >= 1_000


def test_a_reading_of_the_call_counter_adds_a_few_calls_per_profile_to_the_next_not_one_per_profiled_function():
    """A generator summing the entries was resumed once per entry, counted as calls of the phase after it."""
    callees = [eval(f"lambda: {number}") for number in range(2_000)]  # distinct entries in the profile's tree
    with CallCounter() as counter:
        for callee in callees:
            callee()
        first = counter.calls()
        second = counter.calls()
    assert 0 <= second - first < 20


class _CollectedWithCalls:
    """Garbage only the cycle collector frees, whose finalizer makes Python calls when it does."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        for value in range(20):
            str.upper(str(value))


def test_the_call_counter_never_reads_fewer_calls_than_an_earlier_reading_while_finalizers_run():
    callees = [eval(f"lambda: {number}") for number in range(200)]  # distinct entries in the profile's tree
    thresholds = gc.get_threshold()
    gc.set_threshold(10)  # a collection during almost every reading
    readings = []
    try:
        with CallCounter() as counter:
            for round_ in range(600):
                for callee in callees[: round_ % len(callees)]:
                    callee()
                garbage = [_CollectedWithCalls() for _ in range(20)]
                del garbage
                readings.append(counter.calls())
    finally:
        gc.set_threshold(*thresholds)
    assert readings == sorted(readings)
    assert readings[-1] > readings[0]


def test_a_local_checkpoint_interval_reaches_the_measured_stores_config(tmp_path: Path):
    config = job_config(tmp_path, 2, "log", None, local_checkpoint_ms=0)
    assert config.view(StoreConfig, "counts").local_checkpoint_interval_ms == 0
    assert "stores.counts.local.checkpoint.interval.ms" not in job_config(tmp_path, 2, "log", None)
