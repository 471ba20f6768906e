"""``AsyncStreamTask`` in-process: every message enriched from a real HTTP service on loopback exactly once,
partition order kept under concurrency with random latencies, per-key order under ``task.async.ordering=key``,
``task.callback.timeout.ms`` and failed calls under ``task.process.errors``, and the checkpoint covering only
the completed prefix of a partition."""

from __future__ import annotations

import asyncio
import re
import socket
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

import pytest

from millstream import AsyncStreamTask, EndOfStreamListenerTask, InitableTask, WindowableTask
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.model import IncomingMessageEnvelope, SystemStream, SystemStreamPartition, TaskName
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.helpers import create_stream, job_config, seal
from tests.http_service import EnrichService, ServiceSettings, enrich_service
from tests.runtime.fakes import DiscardingCollector
from tests.runtime.test_task_commit import Events, FakeCheckpoints, FakeProducers

ASYNC_TASK = "tests.jobs:AsyncEnrich"


def async_job(
    tmp_path: Path, service: EnrichService, per_partition: int, keys: int = 0, partitions: int = 2, **extra: Any
) -> tuple[Settings, dict[int, list[int]]]:
    """An ``AsyncEnrich`` job over ``partitions`` partitions of ``per_partition`` values each (keyed
    ``value % keys`` when ``keys``, else by partition); returns the values written per partition."""
    config = prepare(job_config(tmp_path, task=ASYNC_TASK, test__service__url=service.url, **extra))
    create_stream(config, "in", partitions)
    create_stream(config, "out", 1)
    written: dict[int, list[int]] = {}
    for partition in range(partitions):
        values = [partition * 100_000 + i for i in range(per_partition)]
        pairs = [(f"k{value % keys}" if keys else f"p{partition}", value) for value in values]
        write_stream(config, SystemStream("log", "in"), pairs, partition=partition)
        written[partition] = values
    seal(config, "in")
    return config, written


def outputs(config: Settings) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def per_partition(results: list[dict[str, Any]]) -> dict[int, list[int]]:
    by: dict[int, list[int]] = defaultdict(list)
    for result in results:
        by[result["p"]].append(result["v"])
    return dict(by)


def checkpointed(config: Settings) -> dict[int, str | None]:
    with metadata_store(config) as store:
        checkpoints = checkpoint_manager(config, store).read_all()
    return {ssp.partition: offset for cp in checkpoints.values() for ssp, offset in cp.offsets.items()}


def test_an_async_task_enriches_every_message_once_keeping_partition_order_under_concurrency(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, written = async_job(tmp_path, service, per_partition=300, task__max__concurrency="50")
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1, "messages were in flight together"
    results = outputs(config)
    assert per_partition(results) == written, "each message once, in offset order per partition"
    assert all(result["e"] == result["v"] * 10 for result in results)
    assert checkpointed(config) == {0: "299", 1: "299"}


def test_per_key_ordering_keeps_each_keys_order_and_runs_keys_concurrently(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, written = async_job(
            tmp_path, service, per_partition=200, keys=7, task__max__concurrency="30", task__async__ordering="key"
        )
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1
    results = outputs(config)
    assert sorted(r["v"] for r in results) == sorted(v for values in written.values() for v in values)
    by_key: dict[tuple[int, int], list[int]] = defaultdict(list)
    for r in results:
        by_key[(r["p"], r["v"] % 7)].append(r["v"])
    assert all(values == sorted(values) for values in by_key.values()), "order kept per key"
    assert checkpointed(config) == {0: "199", 1: "199"}


def test_a_call_past_the_callback_timeout_fails_the_job_naming_task_partition_and_offset(tmp_path):
    with enrich_service(ServiceSettings(hanging=frozenset({100_005}))) as service:
        config, _ = async_job(tmp_path, service, per_partition=20, task__callback__timeout__ms="300")
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    assert re.search(
        r"task 'Partition 1' failed processing offset 5 of stream 'log\.in' partition 1: CallbackTimeoutError: "
        r"process_async did not complete within task\.callback\.timeout\.ms=300",
        result.error or "",
    ), result.error


def test_skip_goes_past_a_timed_out_call_and_a_failed_one_and_keeps_everything_else(tmp_path):
    settings = ServiceSettings(latency=(0.0, 0.005), hanging=frozenset({5}), failing=frozenset({100_007}))
    with enrich_service(settings) as service:
        config, written = async_job(
            tmp_path,
            service,
            per_partition=40,
            task__callback__timeout__ms="300",
            task__max__concurrency="8",
            task__process__errors="skip",
        )
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    expected = {0: [v for v in written[0] if v != 5], 1: [v for v in written[1] if v != 100_007]}
    assert per_partition(outputs(config)) == expected
    assert sum(container.skipped_process_errors for container in result.containers) == 2
    assert checkpointed(config) == {0: "39", 1: "39"}


def test_a_failed_call_fails_the_job_naming_the_remote_call(tmp_path):
    with enrich_service(ServiceSettings(failing=frozenset({7}))) as service:
        config, _ = async_job(tmp_path, service, per_partition=20, task__max__concurrency="4")
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    assert re.search(
        r"task 'Partition 0' failed processing offset 7 of stream 'log\.in' partition 0: EnrichCallError: "
        r"GET http://127\.0\.0\.1:\d+/enrich\?v=7 answered 500",
        result.error or "",
    ), result.error


SSP = SystemStreamPartition("log", "in", 0)


class Gated(AsyncStreamTask):
    """Completes each message when the test sets its future: the test decides the completion order."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.seen: list[str] = []

    async def process_async(self, envelope, collector, coordinator):
        self.seen.append(envelope.offset)
        gate = self.gates[envelope.offset] = asyncio.get_running_loop().create_future()
        await gate


def gated_instance(concurrency: int) -> tuple[TaskInstance, Gated, FakeCheckpoints]:
    events = Events()
    config = Settings({"task.max.concurrency": str(concurrency), "task.callback.timeout.ms": "60000"})
    task = Gated()
    checkpoints = FakeCheckpoints(events)
    instance = TaskInstance(
        TaskName("Partition 0"),
        task,
        frozenset({SSP}),
        ContainerContext(TaskName("Partition 0"), config, frozenset({SSP}), "0"),
        FakeProducers(events),
        DiscardingCollector(),
        checkpoints,
        {},
        {},
    )
    return instance, task, checkpoints


def envelopes(*offsets: int) -> list[IncomingMessageEnvelope]:
    return [IncomingMessageEnvelope(SSP, str(offset), b"k", offset) for offset in offsets]


def test_the_checkpoint_offset_moves_only_over_the_completed_prefix_of_a_partition():
    instance, task, _ = gated_instance(concurrency=10)
    assert instance.process(SSP, envelopes(0, 1, 2, 3)) == 4
    assert task.seen == ["0", "1", "2", "3"], "all four in flight together"
    processor = instance.async_processor
    assert processor is not None
    for offset in ("1", "2"):
        task.gates[offset].set_result(None)
    processor.container_loop.drive(1.0)
    instance.harvest_async()
    assert SSP not in instance.last_processed, "1 and 2 completed, but 0 is still in flight"
    task.gates["0"].set_result(None)
    processor.container_loop.drive(1.0)
    instance.harvest_async()
    assert instance.last_processed[SSP] == "2"
    assert processor.in_flight == 1


def test_a_commit_with_messages_in_flight_checkpoints_the_completed_prefix_and_the_rest_go_on():
    instance, task, checkpoints = gated_instance(concurrency=10)
    processor = instance.async_processor
    assert processor is not None
    instance.process(SSP, envelopes(0, 1, 2))
    task.gates["0"].set_result(None)
    task.gates["2"].set_result(None)
    processor.container_loop.drive(1.0)
    instance.harvest_async()
    instance.commit()
    assert [dict(cp.offsets) for cp in checkpoints.written] == [{SSP: "0"}, {SSP: "0"}], "1 is in flight"
    assert processor.in_flight == 1
    task.gates["1"].set_result(None)
    instance.settle_async()
    instance.commit()
    assert dict(checkpoints.written[-1].offsets) == {SSP: "2"}


def test_a_shutdown_asked_by_a_message_waits_for_the_others_in_flight_and_its_commit_covers_them():
    class ShutsDownAtOne(Gated):
        async def process_async(self, envelope, collector, coordinator):
            await super().process_async(envelope, collector, coordinator)
            if envelope.offset == "1":
                coordinator.shutdown()

    events = Events()
    checkpoints = FakeCheckpoints(events)
    task = ShutsDownAtOne()
    config = Settings({"task.max.concurrency": "10"})
    name = TaskName("Partition 0")
    instance = TaskInstance(
        name, task, frozenset({SSP}), ContainerContext(name, config, frozenset({SSP}), "0"),
        FakeProducers(events), DiscardingCollector(), checkpoints, {}, {},
    )  # fmt: skip
    instance.process(SSP, envelopes(0, 1, 2))
    loop = instance.async_processor.container_loop.loop  # type: ignore[union-attr]
    task.gates["1"].set_result(None)
    loop.call_later(0.05, lambda: task.gates["0"].set_result(None))
    loop.call_later(0.1, lambda: task.gates["2"].set_result(None))
    instance.async_processor.container_loop.drive(1.0)  # type: ignore[union-attr]
    instance.harvest_async()
    assert instance.finished and instance.shutdown_requested
    assert dict(checkpoints.written[-1].offsets) == {SSP: "2"}


def test_a_full_window_holds_back_the_rest_of_the_batch_until_the_deadline():
    instance, task, _ = gated_instance(concurrency=2)
    assert instance.process(SSP, envelopes(0, 1, 2, 3), deadline=0.0) == 2, "no room, deadline passed"
    assert task.seen == ["0", "1"]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_window_of_n_never_has_more_than_n_in_flight(concurrency):
    instance, task, _ = gated_instance(concurrency=concurrency)
    loop = instance.async_processor.container_loop.loop  # type: ignore[union-attr]

    def release_all() -> None:
        for gate in task.gates.values():
            if not gate.done():
                gate.set_result(None)
        loop.call_later(0.005, release_all)

    loop.call_soon(release_all)
    assert instance.process(SSP, envelopes(*range(12))) == 12
    assert instance.async_processor.window.in_flight <= concurrency  # type: ignore[union-attr]
    instance.settle_async()
    assert instance.last_processed[SSP] == "11"


def test_window_and_end_of_stream_wait_for_the_messages_in_flight_and_async_hooks_are_awaited():
    class Hooks(Gated, WindowableTask, EndOfStreamListenerTask):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, int]] = []

        async def window(self, collector, coordinator):  # type: ignore[override]
            await asyncio.sleep(0)
            self.calls.append(("window", len(self.seen)))

        async def on_end_of_stream(self, collector, coordinator):  # type: ignore[override]
            await asyncio.sleep(0)
            self.calls.append(("end", len(self.seen)))

    events = Events()
    task = Hooks()
    name = TaskName("Partition 0")
    context = ContainerContext(name, Settings({"task.max.concurrency": "5"}), frozenset({SSP}), "0")
    instance = TaskInstance(
        name, task, frozenset({SSP}), context,
        FakeProducers(events), DiscardingCollector(), FakeCheckpoints(events), {}, {},
    )  # fmt: skip
    processor = instance.async_processor
    assert processor is not None
    loop = processor.container_loop.loop

    def release_all() -> None:
        for gate in task.gates.values():
            if not gate.done():
                gate.set_result(None)

    instance.process(SSP, envelopes(0, 1))
    loop.call_later(0.05, release_all)
    instance.window()
    assert task.calls == [("window", 2)] and processor.in_flight == 0 and instance.last_processed[SSP] == "1"
    instance.process(SSP, envelopes(2))
    loop.call_later(0.05, release_all)
    instance.mark_end_of_stream(SSP)
    assert task.calls[-1] == ("end", 3) and instance.finished and instance.last_processed[SSP] == "2"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_service_that_is_down_fails_the_job_naming_the_call_then_a_rerun_once_it_is_up_loses_nothing(tmp_path):
    down = EnrichService(port=free_port())  # not started: connections are refused
    config, written = async_job(
        tmp_path, down, per_partition=30, task__max__concurrency="10", job__container__retry__count="1"
    )
    failed = InProcessRunner(config).run(timeout=120)
    assert failed.outcome == "failed"
    assert re.search(
        rf"task 'Partition \d' failed processing offset 0 of stream 'log\.in' partition \d: ClientConnectorError: "
        rf"Cannot connect to host 127\.0\.0\.1:{down.port}",
        failed.error or "",
    ), failed.error
    assert outputs(config) == [] and checkpointed(config) == {}, "nothing produced, nothing checkpointed"
    with enrich_service(port=down.port):
        rerun = InProcessRunner(config).run(timeout=120)
    assert rerun.outcome == "finished", rerun.error
    assert per_partition(outputs(config)) == written


def test_under_skip_a_service_that_is_down_counts_every_message_it_went_past(tmp_path):
    down = EnrichService(port=free_port())
    config, _ = async_job(tmp_path, down, per_partition=25, task__max__concurrency="10", task__process__errors="skip")
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    assert outputs(config) == []
    assert sum(container.skipped_process_errors for container in result.containers) == 50, "none dropped silently"


class FailsWithOthersInFlight(AsyncStreamTask, InitableTask):
    """Offset 3 fails at once; every other message waits forever and, if it is cancelled, records its offset
    (in ``cancelled``, and as a file ``cancelled-<offset>`` in ``test.marker.dir`` when set: a Spark worker's)."""

    cancelled: ClassVar[list[str]] = []

    def init(self, context: Any) -> None:
        self.marker_dir = context.config.get("test.marker.dir")

    async def process_async(self, envelope, collector, coordinator):
        if envelope.offset == "3":
            raise RuntimeError("offset 3 fails")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            FailsWithOthersInFlight.cancelled.append(envelope.offset)
            if self.marker_dir:
                (Path(self.marker_dir) / f"cancelled-{envelope.offset}").touch()
            raise


def failing_with_ten_in_flight(tmp_path: Path, **extra: Any) -> Settings:
    """A ``FailsWithOthersInFlight`` job over one partition of 10 messages, all in flight together (each its own
    key, so offset 3's failure is released as it happens)."""
    config = prepare(
        job_config(
            tmp_path,
            task=f"{__name__}:FailsWithOthersInFlight",
            task__max__concurrency="10",
            task__async__ordering="key",
            **extra,
        )
    )
    create_stream(config, "in", 1)
    write_stream(config, SystemStream("log", "in"), [(f"k{i}", i) for i in range(10)], partition=0)
    seal(config, "in")
    return config


IN_FLIGHT_AT_THE_FAILURE = [str(i) for i in range(10) if i != 3]


def test_a_container_that_fails_with_messages_in_flight_cancels_them_before_it_ends(tmp_path):
    """A failed attempt's coroutines must not outlive it: left on its thread's loop, they would run on in the
    next attempt that thread starts (a Spark Python worker runs its next task on the same thread)."""
    config = failing_with_ten_in_flight(tmp_path)
    FailsWithOthersInFlight.cancelled.clear()
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed" and "offset 3 fails" in (result.error or ""), result.error
    assert sorted(FailsWithOthersInFlight.cancelled, key=int) == IN_FLIGHT_AT_THE_FAILURE
