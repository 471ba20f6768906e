"""High-level jobs end to end on the in-process runner: stages, in-band control, shutdown, restarts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.control.framing import MessageType, unframe
from millstream.control.messages import CombinedWatermarkMessage
from millstream.control.sender import aggregate_partition
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream, SystemStreamPartition
from millstream.testing import InProcessRunner, TestRunner, iter_stream, read_stream, write_stream
from tests.api.apps import (
    RepartitionPassThrough,
    app_config,
    assert_running_counts_are_exact,
    messages,
    reference_counts,
    reference_stateful,
    stateful_records,
    user_messages,
)
from tests.api.state_probe import persisted_control_states
from tests.helpers import create_stream, seal, wait_until

IN = SystemStream("log", "in")


def setup(config: Settings, by_partition: dict[int, list], *, sealed: bool = True) -> None:
    create_stream(config, "in", len(by_partition))
    create_stream(config, "out", 1)
    for partition, pairs in by_partition.items():
        write_stream(config, IN, pairs, partition=partition)
    if sealed:
        seal(config, "in")


def output(config: Settings) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def assert_panes_fired_exactly_when_the_watermark_reached_their_end(records: list[dict[str, Any]]) -> None:
    """In each task's output order, every pane follows a watermark below its end and precedes one at or
    past it (or the end of the input)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["task"], []).append(record)
    for task, sequence in by_task.items():
        for index, record in enumerate(sequence):
            if "watermark" in record:
                continue
            before = [r["watermark"] for r in sequence[:index] if "watermark" in r]
            after = [r["watermark"] for r in sequence[index + 1 :] if "watermark" in r]
            assert not before or before[-1] < record["end"], (task, record, before[-1])
            assert not after or after[0] >= record["end"], (task, record, after[0])


def test_a_bounded_two_stage_job_ends_by_itself_with_every_message_delivered():
    """Samza's EndOfStreamIntegrationTest: 40 events on 4 partitions through a partition_by."""
    data = {p: messages(p, 10) for p in range(4)}
    runner = TestRunner(RepartitionPassThrough, {"job.container.count": 2, "task.commit.ms": 1000})
    result = runner.add_input("in", data).add_output("out").run(timeout=60)
    assert result.job.outcome == "finished"
    delivered = sorted(value["n"] for _, value in result.output("out"))
    assert delivered == sorted(message["n"] for pairs in data.values() for _, message in pairs)


def test_two_repartitionings_in_a_row_deliver_every_message_and_end(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:TwoHops", job__container__count=2, app__intermediate__partitions=3)
    data = {p: messages(p, 30) for p in range(2)}
    setup(config, data)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert sorted(m["n"] for m in output(config)) == sorted(m["n"] for pairs in data.values() for _, m in pairs)
    assert len(result.containers) == 2 and result.messages > 60  # source + two intermediate streams + control


def test_sessions_a_stream_join_and_keyed_state_across_repartitionings_equal_the_plain_python_reference(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:SessionsJoinAndCounts", job__container__count=2)
    data = {p: user_messages(p, 40) for p in range(2)}
    setup(config, data)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    values = output(config)
    assert stateful_records(values) == reference_stateful(data)
    assert_running_counts_are_exact(values)
    assert len(values) == len(reference_stateful(data)), "every record exactly once"


def test_windowed_counts_across_a_repartitioning_fire_exactly_when_the_minimum_watermark_passes(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:WindowedCount", job__container__count=2, test__delay__seconds=0.01)
    data = {0: messages(0, 120), 1: messages(1, 40, start=3)}  # partition 1 holds the watermark back
    setup(config, data)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    records = output(config)
    panes = [r for r in records if "count" in r]
    assert {(p["user"], p["start"]): p["count"] for p in panes} == reference_counts(data)
    assert len(panes) == len(reference_counts(data)), "every pane exactly once"
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
    assert any("watermark" in r for r in records)


def test_aggregated_control_messages_give_the_same_output(tmp_path):
    config = app_config(
        tmp_path, "tests.api.apps:WindowedCount", job__container__count=2, app__control__aggregation="true"
    )
    data = {p: messages(p, 60) for p in range(3)}
    setup(config, data)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    records = output(config)
    assert {(p["user"], p["start"]): p["count"] for p in records if "count" in p} == reference_counts(data)
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)


def run_in_background(config: Settings) -> tuple[InProcessRunner, threading.Thread, dict[str, JobResult]]:
    runner = InProcessRunner(config)
    results: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("result", runner.run(timeout=90)))
    thread.start()
    return runner, thread, results


def test_the_application_split_into_two_jobs_gives_the_single_job_output(tmp_path):
    data = {p: messages(p, 50) for p in range(3)}
    single = app_config(tmp_path / "single", "tests.api.apps:WindowedCount", job__container__count=2)
    setup(single, data)
    assert InProcessRunner(single).run(timeout=60).outcome == "finished"

    split = tmp_path / "split"
    stages = [app_config(split, "tests.api.apps:WindowedCount", app__stage=stage) for stage in (1, 0)]
    assert [c.get("job.name") for c in stages] == ["test-stage-1", "test-stage-0"]
    setup(stages[0], data)
    jobs = [run_in_background(config) for config in stages]  # the downstream job starts first
    for _, thread, _ in jobs:
        thread.join()
    assert [results["result"].outcome for _, _, results in jobs] == ["finished", "finished"]

    def counts(config: Settings) -> Counter:
        return Counter((r["user"], r["start"], r["count"]) for r in output(config) if "count" in r)

    assert counts(stages[0]) == counts(single)
    assert sum(counts(single).values()) == len(reference_counts(data))


def downstream_restart_scenario(
    tmp_path: Path, app: str = "tests.api.apps:WindowedCount"
) -> tuple[Settings, Settings, dict[int, list]]:
    """A split job whose task 0 upstream ends early and task 1 late; the downstream job is stopped once
    it committed past task 0's end-of-stream, so task 0 will never send it again."""
    data = {0: messages(0, 5), 1: messages(1, 60)}
    upstream = app_config(
        tmp_path,
        app,
        app__stage=0,
        test__delay__seconds=0.03,
        test__slow__task="Partition 1",
    )
    downstream = app_config(tmp_path, app, app__stage=1, task__commit__ms=100)
    setup(upstream, data)
    return upstream, downstream, data


def wait_until_the_aggregating_task_recorded_the_end_of(config: Settings, producer: str, timeout: float = 30) -> None:
    """Until the persisted control state of the downstream task reading the aggregate partition (where each
    producer sends its one end-of-stream) holds ``producer``'s end-of-stream."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = persisted_control_states(config).values()
        if any(producer in partition["ended_tasks"] for state in states for partition in state["reconciler"].values()):
            return
        time.sleep(0.02)
    raise AssertionError(f"the downstream tasks never recorded the end-of-stream of {producer}")


def test_a_restarted_downstream_job_continues_where_its_control_state_was(tmp_path):
    upstream, downstream, data = downstream_restart_scenario(tmp_path)
    _, producer, produced = run_in_background(upstream)
    first, consumer, consumed = run_in_background(downstream)
    wait_until_the_aggregating_task_recorded_the_end_of(downstream, "Partition 0")
    first.request_stop()
    consumer.join()
    assert consumed["result"].outcome == "stopped"

    restarted = InProcessRunner(downstream).run(timeout=60)
    producer.join()
    assert produced["result"].outcome == "finished"
    assert restarted.outcome == "finished", "task 0's end-of-stream was remembered"
    counts = {(r["user"], r["start"]): r["count"] for r in output(downstream) if "count" in r}
    assert counts == reference_counts(data)


def test_without_its_control_state_a_restarted_downstream_waits_for_ever_as_samza_did(tmp_path):
    """The failure the persisted state prevents: same scenario, the state deleted before the restart (of a
    stateless stage, whose control state is a metadata store entry)."""
    upstream, downstream, _ = downstream_restart_scenario(tmp_path, "tests.api.apps:RepartitionPassThrough")
    _, producer, _ = run_in_background(upstream)
    first, consumer, _ = run_in_background(downstream)
    wait_until_the_aggregating_task_recorded_the_end_of(downstream, "Partition 0")
    first.request_stop()
    consumer.join()
    producer.join()
    store = metadata_store(downstream)
    store.init()
    store.delete_all(CONTROL_STATE_NAMESPACE, list(store.all(CONTROL_STATE_NAMESPACE)))
    store.close()
    assert InProcessRunner(downstream).run(timeout=4).outcome == "stopped"


def recorded_offsets(config: Settings, stream: str) -> dict[int, str]:
    """Per partition of ``stream``, the offset of the last envelope the tasks' persisted control state reflects."""
    store = metadata_store(config)
    store.init()
    try:
        states = [msgpack.unpackb(raw, strict_map_key=False) for raw in store.all(CONTROL_STATE_NAMESPACE).values()]
    finally:
        store.close()
    offsets = {key: offset for state in states for key, offset in state["offsets"].items()}
    ssps = {SystemStreamPartition.parse_key(key): offset for key, offset in offsets.items()}
    return {ssp.partition: offset for ssp, offset in ssps.items() if ssp.stream == stream}


def test_a_startpoint_rewinds_a_high_level_job_instead_of_being_skipped_as_a_replay(tmp_path):
    """The control state remembers how far each partition was processed; a partition a startpoint moves
    back must be processed again, not skipped as if a restart replayed it."""
    from millstream.contracts.startpoints import StartpointOldest
    from millstream.startpoint.tools import set_startpoints

    config = app_config(tmp_path, "tests.api.apps:RepartitionPassThrough", task__commit__ms=100)
    data = {p: messages(p, 10) for p in range(2)}
    setup(config, data, sealed=False)

    def run_until_output(count: int) -> None:
        runner = InProcessRunner(config)
        job = threading.Thread(target=runner.run, kwargs={"timeout": 60})
        job.start()
        deadline = time.monotonic() + 60
        while len(output(config)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        last = {partition: str(len(values) - 1) for partition, values in data.items()}
        wait_until(lambda: recorded_offsets(config, "in") == last, 30, "a commit recorded the control state")
        runner.request_stop()
        job.join()

    run_until_output(20)
    set_startpoints(config, "log.in", StartpointOldest(), partitions=[0])
    run_until_output(30)
    seen = Counter(value["n"] for value in output(config))
    assert {n: seen[n] for n in range(10)} == dict.fromkeys(range(10), 2)  # partition 0 processed again
    assert {n: seen[n] for n in range(1000, 1010)} == dict.fromkeys(range(1000, 1010), 1)


def watermark_heavy_app(
    tmp_path: Path, aggregate: bool = False, control_interval_ms: int = 0, commit_ms: int = 600_000, **extra: Any
) -> tuple[Settings, dict[int, list[tuple[str, dict[str, Any]]]]]:
    """8x8 partitions and a 5 ms watermark timer: many broadcasts (or, ``aggregate``, control messages through
    the aggregate partitions) unless ``control_interval_ms`` paces them; ``task.commit.ms`` ten minutes unless
    ``commit_ms`` says otherwise, so commits only at the end."""
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__container__count=2,
        app__intermediate__partitions=8,
        app__watermark__interval__ms=5,
        app__control__watermark__interval__ms=control_interval_ms,
        task__commit__ms=commit_ms,
        test__delay__seconds=0.004,
        app__control__aggregation=str(aggregate).lower(),
        **extra,
    )
    data = {p: messages(p, 40, users=7) for p in range(8)}
    setup(config, data)
    return config, data


def assert_exact_without_forced_commits(config: Settings, data: dict[int, Any], result: JobResult) -> list[Any]:
    """Every pane once with its exact count, and no more commits than the tasks' final ones however many
    watermarks went out; returns the output."""
    assert result.outcome == "finished", result.error
    records = output(config)
    assert {(p["user"], p["start"]): p["count"] for p in records if "count" in p} == reference_counts(data)
    assert sum(1 for r in records if "count" in r) == len(reference_counts(data)), "every pane exactly once"
    watermarks = sum(1 for r in records if "watermark" in r)
    commits = sum(container.commits for container in result.containers)
    assert watermarks > 16, "the timer broadcast many watermarks"
    assert commits <= 2 * 8, f"{commits} commits for 8 tasks and {watermarks} watermarks passed on"
    return records


INTERMEDIATE = "test-1-by-user"
"""The intermediate stream of ``WindowedCount`` (``<app.name>-<app.id>-by-user``)."""
KEEP_INTERMEDIATE: dict[str, Any] = {
    f"systems__log__streams__{INTERMEDIATE}__samza__delete__committed__messages": "false"
}
"""The intermediate records kept after their commit, for the tests that count them."""


def paced_app(tmp_path: Path, aggregate: bool) -> tuple[Settings, dict[int, list[tuple[str, dict[str, Any]]]]]:
    """``watermark_heavy_app`` with watermarks paced to one an hour and the intermediate records kept."""
    return watermark_heavy_app(tmp_path, aggregate, control_interval_ms=3_600_000, **KEEP_INTERMEDIATE)


def assert_control_bounded_by_time(config: Settings, data: dict[int, Any], result: JobResult, aggregate: bool) -> None:
    """8 producers, 8 partitions, a 5 ms timer that moves event time at every tick, watermarks paced to one
    an hour: each producer sends its first watermark (8 records broadcast, 1 aggregated), at most one more when
    its watermark passes a window boundary (the bucket's second send: ``millstream.control.pacing``) and one
    end-of-stream; the aggregating task forwards what it reconciled (as many watermarks, and end-of-stream, to
    7 others). Unpaced, every tick would have cost 64 (or 15) records. The windows still fire exactly."""
    assert result.outcome == "finished", result.error
    assert {(p["user"], p["start"]): p["count"] for p in output(config) if "count" in p} == reference_counts(data)
    records = [e.message for _, batch in iter_stream(config, SystemStream("log", INTERMEDIATE)) for e in batch]
    control = sum(1 for record in records if record[0] != MessageType.USER_MESSAGE)
    watermarks = 2 * (8 + 7 if aggregate else 8 * 8)
    assert control <= watermarks + 8 + 7, f"{control} control records for 8x8 partitions and two paced rounds"
    assert sum(1 for record in records if record[0] == MessageType.END_OF_STREAM) == 8 + 7, "once per producer"


def combined_app(
    tmp_path: Path, combine: bool, aggregate: bool = False, **extra: Any
) -> tuple[Settings, dict[int, list[tuple[str, dict[str, Any]]]]]:
    """``watermark_heavy_app`` (8 producing tasks, 4 per container) sending every advance, with
    ``app.control.watermark.combine`` set and the intermediate records kept."""
    extra = {**KEEP_INTERMEDIATE, "app__control__watermark__combine": str(combine).lower(), **extra}
    return watermark_heavy_app(tmp_path, aggregate, 0, **extra)


def assert_watermarks_combined_per_container(config: Settings, combine: bool, aggregate: bool = False) -> None:
    """Combined: no task's own watermark record, only its container's, each naming tasks of one container —
    the names a container's records carry only grow, so the largest sets are the two containers' four tasks
    each; aggregated, only at the aggregate partition, and the watermark records there are the aggregating
    task's copies (no task name). Not combined: the tasks' own records only."""
    partitioned = [
        (partition, e.message)
        for partition, batch in iter_stream(config, SystemStream("log", INTERMEDIATE))
        for e in batch
    ]
    records = [record for _, record in partitioned]
    kinds = Counter(record[0] for record in records)
    combined = [message for record in records if isinstance(message := unframe(record)[1], CombinedWatermarkMessage)]
    if not combine:
        assert not combined and kinds[MessageType.WATERMARK] > 0
        return
    assert combined
    if aggregate:
        at = {partition for partition, record in partitioned if record[0] == MessageType.COMBINED_WATERMARK}
        assert at == {aggregate_partition(INTERMEDIATE, 8)}, "the first hop goes to the aggregate partition only"
        copies = [unframe(record)[1] for record in records if record[0] == MessageType.WATERMARK]
        assert copies and all(getattr(copy, "task_name", "") is None for copy in copies), "the aggregator's only"
    else:
        assert kinds[MessageType.WATERMARK] == 0
    groups = {frozenset(message.task_names) for message in combined}
    largest = [group for group in groups if not any(group < other for other in groups)]
    assert sorted(len(group) for group in largest) == [4, 4], largest
    assert len(largest[0] | largest[1]) == 8, "two containers, disjoint tasks"


BUDGET_SHARE = 0.1


def budgeted_app(tmp_path: Path) -> tuple[Settings, dict[int, list[tuple[str, dict[str, Any]]]]]:
    """``watermark_heavy_app`` broadcast with a 5 ms watermark interval and a budget of a tenth of the user
    records, without floor or maximum delay (``app.control.watermark.budget.*``), the intermediate records kept:
    each container's rounds cost at most its first round plus a tenth of the user records it wrote."""
    return watermark_heavy_app(
        tmp_path,
        False,
        5,
        app__control__watermark__budget__share=BUDGET_SHARE,
        app__control__watermark__budget__floor__records=0,
        app__control__watermark__budget__max__delay__ms=3_600_000,
        **KEEP_INTERMEDIATE,
    )


def assert_watermark_records_within_the_budget(config: Settings, data: dict[int, Any], result: JobResult) -> None:
    """Every pane once, exactly, when the watermark reached its end; the combined watermark records actually
    written cost at most the budget's share of the user records plus each container's first round (2 x 8), and
    more than those first rounds went out (the share was fed). Unbudgeted, a 5 ms interval over the run sends a
    round per container every few ticks: hundreds of records."""
    assert result.outcome == "finished", result.error
    records = output(config)
    assert {(p["user"], p["start"]): p["count"] for p in records if "count" in p} == reference_counts(data)
    assert sum(1 for r in records if "count" in r) == len(reference_counts(data)), "every pane exactly once"
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
    assert sum(container.commits for container in result.containers) <= 2 * 8, "the tasks' final commits only"
    kinds = Counter(e.message[0] for _, batch in iter_stream(config, SystemStream("log", INTERMEDIATE)) for e in batch)
    user, watermarks = kinds[MessageType.USER_MESSAGE], kinds[MessageType.COMBINED_WATERMARK]
    assert user == 320 and kinds[MessageType.WATERMARK] == 0
    assert 2 * 8 < watermarks <= BUDGET_SHARE * user + 2 * 8, f"{watermarks} watermark records for {user} user records"


def test_broadcast_watermark_records_stay_within_their_budget_and_windows_fire_exactly(tmp_path):
    """``app.control.watermark.budget.*`` (``millstream.control.budget``): 8x8 partitions, 2 containers, a 5 ms
    interval; the rounds wait for a tenth of the user records to pay for them, and the windows are still exact."""
    config, data = budgeted_app(tmp_path)
    assert_watermark_records_within_the_budget(config, data, InProcessRunner(config).run(timeout=120))


@pytest.mark.parametrize(
    ("combine", "aggregate"),
    [(True, False), (False, False), (True, True), (False, True)],
    ids=["combined", "per-task", "aggregated-combined", "aggregated-per-task"],
)
def test_a_containers_tasks_combine_their_watermarks_and_windows_fire_exactly_as_with_one_record_per_task(
    tmp_path, combine, aggregate
):
    """8 producers in 2 containers, 8 partitions, every watermark advance sent: each container sends one record
    per partition (aggregated: one to the aggregate partition, whose task forwards what it reconciled) for its
    four producing tasks (``millstream.control.combining``), and every pane fires once, with its exact count,
    when the watermark reached its end — as with each task's own."""
    config, data = combined_app(tmp_path, combine, aggregate)
    records = assert_exact_without_forced_commits(config, data, InProcessRunner(config).run(timeout=120))
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
    assert_watermarks_combined_per_container(config, combine, aggregate)


def test_aggregated_combined_watermarks_under_exactly_once_fire_every_window_once_with_exact_counts(tmp_path):
    """Exactly-once: a container's combined record goes through its one transactional producer after the output
    of the tasks it names (each flushed before it reported), so it is visible with that output or after it; every
    pane fires once, exactly, when the watermark reached its end, and the first hop is the containers' records."""
    config, data = watermark_heavy_app(
        tmp_path,
        aggregate=True,
        commit_ms=100,  # output is visible at the transaction's commit
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="log",
        **KEEP_INTERMEDIATE,
    )
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    records = output(config)
    assert {(p["user"], p["start"]): p["count"] for p in records if "count" in p} == reference_counts(data)
    assert sum(1 for r in records if "count" in r) == len(reference_counts(data)), "every pane exactly once"
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
    assert_watermarks_combined_per_container(config, combine=True, aggregate=True)


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast", "aggregated"])
def test_watermarks_are_paced_by_time_and_end_of_stream_goes_once_per_producer(tmp_path, aggregate):
    config, data = paced_app(tmp_path, aggregate)
    assert_control_bounded_by_time(config, data, InProcessRunner(config).run(timeout=120), aggregate)


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast", "aggregated"])
def test_watermark_broadcasts_do_not_force_commits_and_the_counts_stay_exact(tmp_path, aggregate):
    """Issue 40: a producing task used to commit after each watermark broadcast, so a job whose timer
    fired between messages committed once per message. Commits now follow ``task.commit.ms`` (here: never
    before the end) and the tasks' final commits, however many watermarks went out. In aggregate mode the
    timer committed while it held control messages back for a flush; it now flushes the task's output."""
    config, data = watermark_heavy_app(tmp_path, aggregate)
    records = assert_exact_without_forced_commits(config, data, InProcessRunner(config).run(timeout=120))
    assert_panes_fired_exactly_when_the_watermark_reached_their_end(records)
