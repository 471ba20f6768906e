"""Draining unbounded jobs on the in-process runner: a drain request stops reading the sources, the drain
crosses the intermediate streams, windows fire with the final watermark, tasks commit and the job ends
``drained``; the next run goes on from the checkpoints, and drain messages of another run change nothing."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.control.framing import frame_control_message
from millstream.control.messages import DrainMessage
from millstream.coordinator.drain import request_drain
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.services import DriverServices
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.operators.planner import prepare_application as prepare_with
from millstream.testing import InProcessRunner, write_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.api.test_in_process import output, setup
from tests.helpers import seal, wait_until


def prepare_application(config: Settings) -> None:
    """The coordinator's step for a high-level job (intermediate streams created), with the driver's services."""
    with DriverServices(config) as services:
        prepare_with(config, services.admin)


IN = SystemStream("log", "in")
BY_USER = SystemStream("log", "test-1-by-user")


def checkpointed(config: Settings) -> dict[str, int]:
    """The offsets of the source partitions in the tasks' last checkpoints."""
    store = metadata_store(config)
    store.init()
    try:
        checkpoints = checkpoint_manager(config, store).read_all()
    finally:
        store.close()
    return {
        ssp.key(): int(offset)
        for checkpoint in checkpoints.values()
        for ssp, offset in checkpoint.offsets.items()
        if ssp.system_stream == IN and offset is not None
    }


def last_offsets(data: dict[int, list]) -> dict[str, int]:
    return {IN.partition(p).key(): len(pairs) - 1 for p, pairs in data.items()}


def run_in_background(config: Settings) -> tuple[InProcessRunner, threading.Thread, dict[str, JobResult]]:
    runner = InProcessRunner(config)
    results: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("result", runner.run(timeout=120)))
    thread.start()
    return runner, thread, results


def drain_once_everything_is_checkpointed(config: Settings, data: dict[int, list]) -> JobResult:
    """Run the unbounded job, drain it once its checkpoints cover every source message, return its result."""
    _, thread, results = run_in_background(config)
    wait_until(lambda: checkpointed(config) == last_offsets(data), 60, "every source message checkpointed")
    request = request_drain(config)
    assert request.run_id == "generation-1" or request.run_id == config.get("app.run.id")
    thread.join(timeout=90)
    assert not thread.is_alive(), "the drained job did not end"
    return results["result"]


def panes(config: Settings) -> Counter:
    return Counter((r["user"], r["start"], r["count"]) for r in output(config) if "count" in r)


def expected_panes(data: dict[int, list]) -> Counter:
    return Counter((user, start, count) for (user, start), count in reference_counts(data).items())


def test_draining_an_unbounded_job_fires_every_window_with_exact_counts_commits_and_ends_drained(tmp_path):
    config = app_config(
        tmp_path, "tests.api.apps:WindowedCount", job__container__count=2, job__drain__poll__interval__ms=100
    )
    data = {p: messages(p, 40) for p in range(3)}
    setup(config, data, sealed=False)
    result = drain_once_everything_is_checkpointed(config, data)
    assert result.outcome == "drained", result.error
    assert {c.outcome for c in result.containers} == {"drained"}
    assert panes(config) == expected_panes(data), "windows past the watermark fired on drain, each once"
    assert checkpointed(config) == last_offsets(data)


def test_a_drained_job_restarts_from_its_checkpoints_and_is_not_considered_ended(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:WindowedCount", job__drain__poll__interval__ms=100)
    first = {p: messages(p, 30) for p in range(2)}
    setup(config, first, sealed=False)
    assert drain_once_everything_is_checkpointed(config, first).outcome == "drained"
    drained_output = len(output(config))

    later = {p: messages(p, 20, start=1000) for p in range(2)}
    for partition, pairs in later.items():
        write_stream(config, IN, pairs, partition=partition)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", "the sources and intermediate partitions were read on to their end"
    new_panes = Counter((r["user"], r["start"], r["count"]) for r in output(config)[drained_output:] if "count" in r)
    assert new_panes == expected_panes(later), "only the new messages, each counted once"
    assert checkpointed(config) == {key: offset + 20 for key, offset in last_offsets(first).items()}


def test_drain_messages_of_another_run_left_in_an_intermediate_stream_are_ignored(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:WindowedCount", job__container__count=2)
    data = {p: messages(p, 30) for p in range(2)}
    setup(config, data)  # sealed: the job ends by itself unless a stale drain ends it early
    prepare_application(config)
    stale = frame_control_message(DrainMessage(None, 0, "generation-0"))
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    for partition in range(2):
        producer.send("test", OutgoingMessageEnvelope(BY_USER, stale, None, partition=partition))
    producer.flush("test")
    producer.stop()
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert panes(config) == expected_panes(data)


def test_an_intermediate_record_of_an_unknown_type_is_skipped_not_a_container_failure(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:WindowedCount")
    data = {p: messages(p, 20) for p in range(2)}
    setup(config, data)
    prepare_application(config)
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    for partition in range(2):
        newer = bytes([5]) + b'{"version": 2, "taskName": "Partition 0", "taskCount": 2}'
        producer.send("test", OutgoingMessageEnvelope(BY_USER, newer, None, partition=partition))
    producer.flush("test")
    producer.stop()
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert panes(config) == expected_panes(data)


def test_a_drain_requested_of_a_job_that_is_not_running_is_refused_writing_nothing(tmp_path: Path):
    import pytest

    from millstream.contracts.coordination import DRAIN_NAMESPACE
    from millstream.coordinator.drain import DrainRefusedError

    config = app_config(tmp_path, "tests.api.apps:WindowedCount")
    data = {p: messages(p, 5) for p in range(2)}
    setup(config, data)
    with pytest.raises(DrainRefusedError, match="is not running"):
        request_drain(config)
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    with pytest.raises(DrainRefusedError, match="is not running"):
        request_drain(config)
    store = metadata_store(config)
    store.init()
    assert store.all(DRAIN_NAMESPACE) == {}
    store.close()


def test_draining_the_first_stage_drains_a_second_stage_run_as_its_own_job_sharing_the_run_id(tmp_path):
    data = {p: messages(p, 30) for p in range(2)}
    stages = [
        app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=stage, app__run__id="deploy-1")
        for stage in (0, 1)
    ]
    setup(stages[0], data, sealed=False)
    jobs = [run_in_background(config) for config in reversed(stages)]  # the downstream job starts first
    wait_until(lambda: checkpointed(stages[0]) == last_offsets(data), 60, "stage 0 checkpointed every message")
    assert request_drain(stages[0]).run_id == "deploy-1"
    for _, thread, _ in jobs:
        thread.join(timeout=90)
    assert [results["result"].outcome for _, _, results in jobs] == ["drained", "drained"]
    assert panes(stages[1]) == expected_panes(data)


def test_a_second_stage_with_another_run_id_does_not_drain_with_the_first(tmp_path):
    data = {p: messages(p, 30) for p in range(2)}
    upstream = app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=0, app__run__id="deploy-1")
    downstream = app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=1)  # generation-1
    setup(upstream, data, sealed=False)
    _, producer, produced = run_in_background(upstream)
    consumer_runner, consumer, consumed = run_in_background(downstream)
    wait_until(lambda: checkpointed(upstream) == last_offsets(data), 60, "stage 0 checkpointed every message")
    request_drain(upstream)
    producer.join(timeout=90)
    assert produced["result"].outcome == "drained"
    wait_until(lambda: sum(panes(downstream).values()) > 0, 60, "stage 1 fired the windows the watermark passed")
    assert consumer.is_alive(), "the drain of run deploy-1 is not stage 1's"
    consumer_runner.request_stop()
    consumer.join(timeout=60)
    assert consumed["result"].outcome == "stopped"
    assert panes(downstream) != expected_panes(data), "the windows past the last watermark wait for the next run"


def test_a_drain_through_aggregated_control_messages_fires_every_window_with_exact_counts(tmp_path):
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__container__count=2,
        job__drain__poll__interval__ms=100,
        app__control__aggregation="true",
    )
    data = {p: messages(p, 40) for p in range(3)}
    setup(config, data, sealed=False)
    result = drain_once_everything_is_checkpointed(config, data)
    assert result.outcome == "drained", result.error
    assert panes(config) == expected_panes(data)
