"""A job with metrics on, in process: the driver's endpoint while it runs, and nothing measured when off."""

from __future__ import annotations

import threading

from millstream.coordinator.job_result import JobResult
from millstream.metadata.factory import metadata_store
from millstream.metrics.snapshot import METRICS_NAMESPACE
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config
from tests.metrics.job_metrics import check_running_job
from tests.metrics.scrape import free_port

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
    from tests.helpers import seal

    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)

    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        assert store.all(METRICS_NAMESPACE) == {}
