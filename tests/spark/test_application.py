"""High-level applications through the Spark runner: stages in one job or split into jobs, in-band
watermarks and end-of-stream between them, and a downstream-only container killed mid-run."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.control.sender import aggregate_partition
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import read_stream, write_stream
from tests.api.apps import app_config, messages, reference_counts, reference_stateful, stateful_records, user_messages
from tests.api.state_probe import persisted_control_states
from tests.api.test_in_process import (
    assert_control_bounded_by_time,
    assert_exact_without_forced_commits,
    assert_panes_fired_exactly_when_the_watermark_reached_their_end,
    assert_watermark_records_within_the_budget,
    assert_watermarks_combined_per_container,
    budgeted_app,
    combined_app,
    paced_app,
)
from tests.api.test_intermediate_streams import INTERMEDIATE, staged
from tests.helpers import create_stream, seal, wait_until
from tests.runtime.test_final_commits_in_jobs import (
    assert_every_task_checkpointed_the_end_of_its_partitions,
    assert_exact_windows,
    grouped_job,
)

pytestmark = pytest.mark.spark

IN = SystemStream("log", "in")


def setup(config: Settings, data: dict[int, list]) -> None:
    create_stream(config, "in", len(data))
    create_stream(config, "out", 1)
    for partition, pairs in data.items():
        write_stream(config, IN, pairs, partition=partition)
    seal(config, "in")


def output(config: Settings) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def pane_counts(config: Settings) -> Counter:
    return Counter((r["user"], r["start"], r["count"]) for r in output(config) if "count" in r)


def test_a_bounded_two_stage_job_ends_by_itself_with_every_message_delivered(spark_local, tmp_path):
    config = app_config(tmp_path, "tests.api.apps:RepartitionPassThrough", job__container__count=2)
    data = {p: messages(p, 10) for p in range(4)}
    setup(config, data)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert sorted(m["n"] for m in output(config)) == sorted(m["n"] for pairs in data.values() for _, m in pairs)


@pytest.mark.parametrize("aggregation", ["false", "true"])
def test_tasks_ending_together_are_committed_with_exact_windows_and_final_checkpoints(
    spark_local, tmp_path, aggregation
):
    """Several downstream tasks per container reach end-of-stream together; the run loop commits them as a group,
    with their snapshots on the commit threads (``runtime/run_loop.py``). Through the Spark runner as in-process."""
    config, data = grouped_job(tmp_path, app__control__aggregation=aggregation)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert_exact_windows(config, data)
    assert_every_task_checkpointed_the_end_of_its_partitions(config, result)


@pytest.mark.timeout(300)
def test_a_bounded_job_with_a_stream_join_ends_after_its_input_without_waiting_for_the_commit_interval(
    spark_local, tmp_path
):
    """The first commit's upload is held for 2 s (the testing pause) while the input ends, so the commits the
    tasks ask for at end-of-stream are skipped. They must be made once the upload ended: left to the commit
    timer (task.commit.ms = 600 s, beyond this test's timeout), end-of-stream would never reach the
    intermediate streams in time and the test would time out."""
    config = app_config(
        tmp_path,
        "tests.api.apps:SessionsJoinAndCounts",
        job__container__count=2,
        task__commit__ms=600_000,
        test__delay__seconds=0.02,  # the input lasts past the first timer commit, whose upload pauses
        task__commit__testing__pause__at="after-upload",
        task__commit__testing__pause__ms=2000,
        task__commit__testing__marker__dir=tmp_path / "pause",
    )
    data = {p: user_messages(p, 40) for p in range(2)}
    setup(config, data)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert result.waiting_for == {}
    assert (tmp_path / "pause" / "after-upload").exists(), "an upload was in flight at the end, as intended"
    values = output(config)
    assert stateful_records(values) == reference_stateful(data)
    assert len(values) == len(reference_stateful(data)), "every record exactly once"


def test_windowed_counts_fire_when_the_minimum_watermark_passes_and_split_jobs_give_the_same_output(
    spark_local, tmp_path
):
    data = {0: messages(0, 80), 1: messages(1, 30, start=5)}
    single = app_config(
        tmp_path / "single", "tests.api.apps:WindowedCount", job__container__count=2, test__delay__seconds=0.01
    )
    setup(single, data)
    result = SparkJobRunner(single, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    records = output(single)
    assert {(r["user"], r["start"]): r["count"] for r in records if "count" in r} == reference_counts(data)
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)

    stages = [app_config(tmp_path / "split", "tests.api.apps:WindowedCount", app__stage=s) for s in (0, 1)]
    setup(stages[0], data)
    outcomes: dict[int, JobResult] = {}
    jobs = [
        threading.Thread(target=lambda s=s: outcomes.setdefault(s, SparkJobRunner(stages[s], spark=spark_local).run()))
        for s in (1, 0)
    ]
    for job in jobs:
        job.start()
        wait_until(lambda: running(stages[1]), 120, "stage 1's containers run before stage 0 starts")
    for job in jobs:
        job.join()
    assert [outcomes[s].outcome for s in (0, 1)] == ["finished", "finished"], [outcomes[s].error for s in (0, 1)]
    assert pane_counts(stages[1]) == pane_counts(single)


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast-budgeted", "aggregated"])
def test_watermark_broadcasts_through_spark_do_not_force_commits_and_the_counts_stay_exact(
    spark_local, tmp_path, aggregate
):
    """As ``tests/api/test_in_process.py``'s: 8x8 partitions, a 5 ms watermark timer, commits only at the end
    (broadcast, or aggregated control messages); 8 producers in 2 Spark containers, so each container sends one
    watermark record for its four tasks — to every partition, its rounds within a watermark budget of a tenth of
    the user records (``budgeted_app``), or (aggregated, every advance sent) to the aggregate partition, whose
    task forwards what it reconciled — and every pane fires exactly."""
    if aggregate:
        config, data = combined_app(tmp_path, combine=True, aggregate=True)
        records = assert_exact_without_forced_commits(config, data, SparkJobRunner(config, spark=spark_local).run())
        assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
    else:
        config, data = budgeted_app(tmp_path)
        assert_watermark_records_within_the_budget(config, data, SparkJobRunner(config, spark=spark_local).run())
    assert_watermarks_combined_per_container(config, combine=True, aggregate=aggregate)


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast", "aggregated"])
def test_watermarks_through_spark_are_paced_by_time_and_end_of_stream_goes_once_per_producer(
    spark_local, tmp_path, aggregate
):
    """As ``tests/api/test_in_process.py``'s: 8x8 partitions, a 5 ms timer, watermarks paced to one an hour."""
    config, data = paced_app(tmp_path, aggregate)
    assert_control_bounded_by_time(config, data, SparkJobRunner(config, spark=spark_local).run(), aggregate)


def running(config: Settings) -> bool:
    """Whether a container of ``config``'s job reported that it runs."""
    store = metadata_store(config)
    try:
        return any(status.get("state") == "running" for status in coordination.container_statuses(store).values())
    finally:
        store.close()


def test_a_sigkilled_downstream_only_container_resumes_where_its_control_state_was(spark_local, tmp_path):
    """Tasks 0 and 1 read the source and the intermediate partitions 0 and 1; task 2, alone in container 2,
    reads only intermediate partition 2 — the aggregate partition (``app.id`` 9 makes it so), where each
    producer sends its one end-of-stream. Task 0's input ends early, task 1's late: container 2 is killed
    after it committed past task 0's end-of-stream — which nobody will send again."""
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__container__count=3,
        app__id=9,
        app__intermediate__partitions=3,
        task__commit__ms=100,
        test__delay__seconds=0.15,  # task 1 takes 15 s: container 2 once started 3.5 s after it, on a loaded machine
        test__slow__task="Partition 1",
    )
    assert aggregate_partition("test-9-by-user", 3) == 2
    data = {0: messages(0, 5), 1: messages(1, 100)}
    setup(config, data)
    store = metadata_store(config)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", SparkJobRunner(config, spark=spark_local).run()))
    job.start()
    victim = wait_for(
        lambda: _committed_past_end_of_stream(config, store, "Partition 2", "Partition 0") or not job.is_alive(), 90
    )
    assert job.is_alive(), "the job ended before container 2 committed past task 0's end-of-stream: slow task 1 more"
    os.kill(victim, signal.SIGKILL)
    job.join()

    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert {c.container_id: c.epoch for c in result.containers}["2"] >= 2, "container 2 was restarted"
    counts = {(r["user"], r["start"]): r["count"] for r in output(config) if "count" in r}
    assert counts == reference_counts(data)


def _committed_past_end_of_stream(config: Settings, store: Any, task: str, producer: str) -> int | None:
    """The pid of the running container of ``task`` once its state (in its operator store's changelog)
    holds ``producer``'s end-of-stream and its checkpoint covers the offsets that state reflects; else None."""
    state = persisted_control_states(config).get(task)
    if state is None:
        return None
    if not all(producer in p["ended_tasks"] for p in state["reconciler"].values()):
        return None
    checkpoint = checkpoint_manager(config, store).read_all().get(TaskName(task))
    offsets = {
        ssp.key(): int(offset)
        for ssp, offset in (checkpoint.offsets.items() if checkpoint else ())
        if offset is not None and ssp.key() in state["offsets"]  # not the store's changelog entry
    }
    if any(offsets.get(key, -1) < int(offset) for key, offset in state["offsets"].items()):
        return None
    status = coordination.container_statuses(store).get("2", {})
    return int(status["pid"]) if status.get("state") == "running" else None


def wait_for(probe, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {timeout}s")


def test_a_fresh_stage_on_an_intermediate_stream_that_lost_records_fails_through_spark_naming_them(
    spark_local, tmp_path
):
    _, downstream, _ = staged(tmp_path)
    with system_factory(downstream, "log").get_admin("log", downstream) as admin:
        admin.delete_messages({SystemStreamPartition("log", INTERMEDIATE, 1): "3"})

    runner = SparkJobRunner(downstream, spark=spark_local)
    result = runner.run()
    assert result.outcome == "failed"
    assert max(coordination.container_epoch(runner.store, cid) for cid in ("0", "1")) == 1, (
        "deleted is deleted: no retry"
    )
    assert (
        f"stream 'log.{INTERMEDIATE}' partition 1: reading the intermediate stream from its start, but offsets 0 up "
        "to 3 (exclusive) were already deleted" in (result.error or "")
    ), result.error
    assert not [r for r in output(downstream) if "count" in r], "no window was emitted from the partial stream"
