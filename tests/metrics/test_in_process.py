"""A job with metrics on, in process: the driver's endpoint while it runs, and nothing measured when off."""

from __future__ import annotations

import threading

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.metrics_snapshot import METRICS_NAMESPACE, read_snapshots
from millstream.coordinator.job_result import JobResult
from millstream.metrics.reporters import total
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import InProcessRunner, write_stream
from tests.api.apps import app_config, messages
from tests.helpers import create_stream, fill, job_config, seal
from tests.integration.processes import free_port
from tests.metrics.job_metrics import check_running_job
from tests.storage.harness import state_config

SECRET = "s3cr3t-value-never-shown"


def test_a_running_job_shows_its_metrics_and_status(tmp_path) -> None:
    port = free_port()
    config = job_config(
        tmp_path,
        task="tests.jobs:MeteredPassThrough",
        job__container__count=2,
        metrics__prometheus__port=port,
        metrics__prometheus__host="127.0.0.1",
        metrics__snapshot__interval__ms=100,
        metrics__reporters="log",
        sensitive__api__key=SECRET,
    )
    create_stream(config, "in", 3)
    create_stream(config, "out", 3)
    fill(config, "in", 3, 200)  # never sealed: the job runs until stopped
    runner = InProcessRunner(config)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=120)))
    job.start()
    try:
        document = check_running_job(port, 600, 3)
        fill(config, "in", 3, 50, start=200)
        check_running_job(port, 750, 3)
    finally:
        runner.request_stop()
        job.join(60)

    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert document["job"]["name"] == "test" and document["generation"] == 1
    assert set(document["containers"]) == {"0", "1"}
    assert all(c["state"] == "running" and c["attempt"] == 1 for c in document["containers"].values())
    assert sorted(row["partition"] for row in document["partitions"]) == [0, 1, 2]
    assert document["startpoints"] == {"pending": [], "failures": {}}
    assert SECRET not in str(document)


def test_with_metrics_off_nothing_is_measured_or_shipped(tmp_path) -> None:
    config = job_config(tmp_path, task="tests.jobs:MeteredPassThrough")
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 20)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)

    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        assert store.all(METRICS_NAMESPACE) == {}


def test_the_last_snapshot_counts_a_finished_jobs_dead_letters_and_skipped_errors(tmp_path) -> None:
    config = job_config(
        tmp_path,
        task="tests.jobs:FailingOnSome",
        test__fail__values="2",
        task__process__errors="skip",
        task__drop__deserialization__errors="true",
        metrics__enabled="true",
        metrics__snapshot__interval__ms=50,
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    for value in (b"1", b"{not json", b"2"):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("log", "in"), value))
    producer.flush("t")
    producer.stop()
    seal(config, "in")

    result = InProcessRunner(config).run(timeout=60)

    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        (snapshot,) = read_snapshots(store).values()
    assert (snapshot.container_id, snapshot.state, snapshot.attempt) == ("0", "finished", 1)
    assert total(snapshot.samples, "dead_lettered") == 1
    assert total(snapshot.samples, "process_errors_skipped") == 1
    assert total(snapshot.samples, "processed") == 2
    assert total(snapshot.samples, "commits") >= 1


def test_a_stateful_job_times_its_store_restore(tmp_path) -> None:
    config = Settings.of(state_config(tmp_path, "changelog", metrics__enabled="true"))
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 30)
    seal(config, "in")

    result = InProcessRunner(config).run(timeout=60)

    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        (snapshot,) = read_snapshots(store).values()
    (restore,) = [s for s in snapshot.samples if s.name == "store_restore"]
    assert restore.kind == "timer" and restore.count == 1 and restore.value >= 0


def test_a_high_level_job_shows_watermarks_per_input_and_operator_and_its_ended_inputs(tmp_path) -> None:
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        metrics__enabled="true",
        metrics__snapshot__interval__ms=50,
        test__delay__seconds=0.02,  # 0.4 s per partition: snapshots while the inputs still have watermarks
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition in range(2):
        write_stream(config, SystemStream("log", "in"), messages(partition, 20, start=100), partition=partition)
    seal(config, "in")

    result = InProcessRunner(config).run(timeout=90)

    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        samples = [sample for snapshot in read_snapshots(store).values() for sample in snapshot.samples]
    inputs = {
        dict(s.labels)["partition"]: s.value
        for s in samples
        if s.name == "input_watermark_timestamp_seconds" and dict(s.labels)["stream"] == "in"
    }
    # the newest event time of each partition in seconds, as the last snapshot before its end saw it
    assert set(inputs) == {"0", "1"} and all(100 <= value <= 119 for value in inputs.values()), inputs
    operators = {dict(s.labels)["operator"] for s in samples if s.name == "operator_watermark_timestamp_seconds"}
    assert any("per-10s" in operator for operator in operators), operators
    ended = [s for s in samples if s.name == "input_end_of_stream" and dict(s.labels)["stream"] == "in"]
    assert len(ended) == 2 and all(s.value == 1 for s in ended)
