"""The container end to end on the embedded log system, in-process (the Spark runner has its own tests)."""

from typing import Any, cast

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import MillstreamError
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.runtime.container import _register_consumers
from millstream.testing import InProcessRunner, TestRunner, read_stream, write_stream
from tests.jobs import CountingTask, FailsOnPoison, PassThrough, ShutdownAfterThree


def keyed(n: int) -> list[tuple[str, str]]:
    return [(f"k{i}", f"v{i}") for i in range(n)]


def test_every_message_of_a_bounded_input_is_processed_once_and_the_job_ends():
    result = TestRunner(PassThrough, {"job.container.count": 2}).add_input("in", keyed(200), partitions=4).run()
    out = result.output("out")
    assert result.job.outcome == "finished"
    assert sorted(value["v"] for _, value in out) == sorted(v for _, v in keyed(200))
    assert result.job.messages == 200


def test_output_keeps_each_input_key():
    result = TestRunner(PassThrough).add_input("in", keyed(10), partitions=2).run()
    assert {key: value["v"] for key, value in result.output("out")} == dict(keyed(10))


def test_end_of_stream_listener_runs_once_per_task_after_its_last_message():
    result = TestRunner(CountingTask).add_input("in", keyed(100), partitions=4).run()
    counts = [value for _, value in result.output("out")]
    assert sorted(c["task"] for c in counts) == [f"Partition {p}" for p in range(4)]
    assert sum(c["count"] for c in counts) == 100


def test_window_is_called_every_window_ms_between_messages():
    config = {"task.window.ms": 10, "test.delay.seconds": 0.002}
    result = TestRunner(CountingTask, config).add_input("in", keyed(100)).run()
    ((_, report),) = result.output("out")
    assert report["count"] == 100
    assert report["windows"] >= 5  # at least 200 ms of processing
    assert report["windows"] <= report["ran_ms"] / 10 + 1  # never more than one window each 10 ms it ran


def test_shutdown_request_commits_and_stops_the_container():
    runner = TestRunner(ShutdownAfterThree).add_input("in", keyed(50))
    result = runner.run()
    assert len(result.output("out")) == 3
    store = metadata_store(result.config)
    checkpoints = checkpoint_manager(result.config, store).read_all()
    assert [str(ssp_offset) for ssp_offset in checkpoints[TaskName("Partition 0")].offsets.values()] == ["2"]


def test_a_failing_task_fails_the_job_with_its_error():
    with pytest.raises(MillstreamError, match="poison message at offset 2"):
        TestRunner(FailsOnPoison, {"systems.log.streams.in.samza.msg.serde": "string"}).add_input(
            "in", [(None, "a"), (None, "b"), (None, "poison")]
        ).run()


def test_malformed_message_fails_naming_stream_partition_and_offset(tmp_path):
    config = _bytes_job(tmp_path)
    _create(config, "in", [b'{"ok": 1}', b"{not json"], seal=True)
    result = InProcessRunner(config).run(timeout=30)
    assert result.outcome == "failed" and result.error is not None
    assert "offset 1 of stream 'log.in' partition 0" in result.error


def test_dropped_deserialization_errors_are_counted_and_dead_lettered(tmp_path):
    config = _bytes_job(tmp_path, {"task.drop.deserialization.errors": "true", "task.dead.letter.stream": "log.dead"})
    _create(config, "in", [b'{"ok": 1}', b"{not json", b'{"ok": 2}'], seal=True)
    result = InProcessRunner(config).run(timeout=30)
    assert result.outcome == "finished"
    assert result.containers[0].dropped_deserialization_errors == 1
    assert [v["v"] for _, v in read_stream(config, SystemStream("log", "out"))[0]] == [{"ok": 1}, {"ok": 2}]
    (dead,) = read_stream(config, SystemStream("log", "dead"))[0]
    assert dead[1] == b"{not json"


def test_restart_resumes_after_the_checkpoint_without_reprocessing(tmp_path):
    config = _bytes_job(tmp_path)
    _create(config, "in", [b"1", b"2", b"3"], seal=False)
    runner = InProcessRunner(config)
    import threading

    timer = threading.Timer(1.5, runner.request_stop)
    timer.start()
    first = runner.run(timeout=30)
    assert first.outcome == "stopped"
    write_stream(config, SystemStream("log", "in"), [(None, 4), (None, 5)])
    _seal(config, "in")
    second = InProcessRunner(config).run(timeout=30)
    assert second.outcome == "finished"
    assert second.generation == first.generation + 1
    values = [v["v"] for _, v in read_stream(config, SystemStream("log", "out"))[0]]
    assert values == [1, 2, 3, 4, 5]


def _bytes_job(tmp_path, extra=None) -> Settings:
    values = {
        "job.name": "t",
        "job.data.dir": str(tmp_path),
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.in",
        "task.commit.ms": "100",
        "systems.log.samza.offset.default": "oldest",
        "systems.log.streams.in.samza.msg.serde": "json",
        "systems.log.streams.out.samza.msg.serde": "json",
        **(extra or {}),
    }
    return prepare(Settings(values))


def _create(config: Settings, stream: str, values: list[bytes], seal: bool) -> None:
    from millstream.composition.systems import system_factory
    from millstream.contracts.systems import StreamSpec

    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    admin.create_stream(StreamSpec("log", stream, 1))
    admin.create_stream(StreamSpec("log", "out", 1))
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    from millstream.model import OutgoingMessageEnvelope

    for value in values:
        producer.send("t", OutgoingMessageEnvelope(SystemStream("log", stream), value))
    producer.flush("t")
    producer.stop()
    if seal:
        admin.seal_stream(stream)
    admin.stop()


def _seal(config: Settings, stream: str) -> None:
    from millstream.composition.systems import system_factory

    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    admin.seal_stream(stream)
    admin.stop()


def test_broadcast_partition_is_delivered_whole_to_every_task():
    result = (
        TestRunner(CountingTask, {"task.broadcast.inputs": "log.side#0"})
        .add_input("in", {0: keyed(10), 1: keyed(20)})
        .add_input("side", keyed(5))
        .run()
    )
    counts = {value["task"]: value["count"] for _, value in result.output("out")}
    assert counts == {"Partition 0": 10 + 5, "Partition 1": 20 + 5}


def test_group_by_system_stream_partition_makes_a_task_per_partition():
    config = {"job.systemstreampartition.grouper.factory": "GroupBySystemStreamPartition"}
    result = TestRunner(CountingTask, config).add_input("a", keyed(4), partitions=2).add_input("b", keyed(6)).run()
    counts = {value["task"]: value["count"] for _, value in result.output("out")}
    assert sorted(counts) == [
        "SystemStreamPartition [log, a, 0]",
        "SystemStreamPartition [log, a, 1]",
        "SystemStreamPartition [log, b, 0]",
    ]
    assert sum(counts.values()) == 10


def test_checkpoints_are_written_only_after_the_output_is_durable(tmp_path):
    """At-least-once: every checkpointed input offset has its output already in the output stream."""
    from millstream.checkpoint.factory import checkpoint_manager as manager_for
    from tests.helpers import create_stream, fill, job_config, output_origins, seal

    config = job_config(tmp_path, task="tests.jobs:SlowPassThrough", test__delay__seconds=0.0005)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 400)
    seal(config, "in")
    runner = InProcessRunner(config)
    import threading

    job = threading.Thread(target=runner.run)
    job.start()
    store = metadata_store(config)
    checked = 0
    while job.is_alive():
        checkpoints = manager_for(config, store).read_all()
        if checkpoints:
            # read the checkpoint first, then the output: the output must already cover it
            origins = set(output_origins(config))
            for checkpoint in checkpoints.values():
                for ssp, offset in checkpoint.offsets.items():
                    assert offset is not None
                    assert all((ssp.partition, v) in origins for v in range(int(offset) + 1))
            checked += 1
    job.join()
    assert checked > 0


class RefusingConsumer:
    """A described consumer whose registration fails, as one does for an offset trimmed since it was planned."""

    def register(self, ssp: SystemStreamPartition, offset: str) -> None:
        raise MillstreamError(f"offset {offset} of {ssp} is gone")


def test_a_described_consumer_whose_registration_fails_is_left_where_the_container_stops_it() -> None:
    described: dict[str, Any] = {"log": RefusingConsumer()}
    with pytest.raises(MillstreamError, match="is gone"):
        _register_consumers(cast(Any, None), {SystemStreamPartition("log", "in", 0): "5"}, described)
    assert list(described) == ["log"]  # the container's cleanup stops what is still there
