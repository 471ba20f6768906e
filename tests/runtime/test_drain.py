"""Draining a low-level job: the containers stop reading, each task gets ``on_drain`` (Samza's
``DrainListenerTask``), commits what it processed and the job ends ``drained``; the next run reads on."""

from __future__ import annotations

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream
from tests.api.test_drain import checkpointed, run_in_background
from tests.helpers import create_stream, fill, job_config, seal, wait_until

IN = SystemStream("log", "in")


def reports(config) -> list[dict]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def test_a_drained_stream_task_gets_on_drain_commits_what_it_processed_and_the_job_ends_drained(tmp_path):
    config = job_config(
        tmp_path, "tests.jobs:DrainReportingTask", job__container__count=2, job__drain__poll__interval__ms=100
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    fill(config, "in", 2, 25)  # unbounded: never sealed
    _, thread, results = run_in_background(config)
    wait_until(lambda: checkpointed(config) == {"log.in.0": 24, "log.in.1": 24}, 60, "every message checkpointed")
    store = metadata_store(config)
    store.init()
    coordination.request_drain(store, "generation-1")
    store.close()
    thread.join(timeout=60)
    assert results["result"].outcome == "drained"
    assert sorted((r["task"], r["drained"]) for r in reports(config)) == [("Partition 0", 25), ("Partition 1", 25)]
    assert not any("windows" in r for r in reports(config)), "on_end_of_stream is not called on drain"

    fill(config, "in", 2, 5, start=100)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", "a drain is not an end: the next run reads on and ends at the seal"
    assert sorted(r["count"] for r in reports(config) if "windows" in r) == [5, 5], "from the drained checkpoints"


def test_a_drain_request_of_another_run_does_not_drain_the_job(tmp_path):
    config = job_config(tmp_path, "tests.jobs:DrainReportingTask", job__drain__poll__interval__ms=50)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 10)
    runner, thread, results = run_in_background(config)
    wait_until(lambda: checkpointed(config) == {"log.in.0": 9}, 60, "every message checkpointed")
    store = metadata_store(config)
    store.init()
    coordination.request_drain(store, "generation-0")
    store.close()
    fill(config, "in", 1, 10, start=10)  # read and committed after the request: the monitor polled meanwhile
    wait_until(lambda: checkpointed(config) == {"log.in.0": 19}, 60, "the later messages checkpointed")
    assert thread.is_alive() and reports(config) == [], "still running, never drained"
    runner.request_stop()
    thread.join(timeout=60)
    assert results["result"].outcome == "stopped"
