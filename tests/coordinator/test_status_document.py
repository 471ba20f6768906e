"""``/status.json`` reads the containers' snapshots: start-up progress, failures and watermarks included."""

from __future__ import annotations

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metrics import Sample
from millstream.contracts.metrics_snapshot import read_snapshots, write_snapshot
from millstream.coordinator.status_document import status_document
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, seal


def test_restore_progress_failures_and_watermarks_in_a_containers_snapshot_reach_the_status_document(tmp_path):
    config = Settings.of(job_config(tmp_path, task="tests.jobs:MeteredPassThrough", metrics__enabled="true"))
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 10)
    seal(config, "in")
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    with metadata_store(config) as store:
        (snapshot,) = read_snapshots(store).values()
        task = (("task", "Partition 1"),)
        extra = [
            Sample("store_restore_bytes", "gauge", (("store", "counts"), *task), 1200.0),
            Sample("dead_lettered", "counter", (), 3.0),
            Sample("watermark", "gauge", (("partition", "1"), ("stream", "in"), ("system", "log"), *task), 5000.0),
        ]
        snapshot.samples.extend(extra)
        write_snapshot(store, snapshot)

    document = status_document(config)

    container = document["containers"]["0"]
    assert container["processed"] == 20
    assert {name: figures["processed"] for name, figures in container["tasks"].items()} == {
        "Partition 0": 10,
        "Partition 1": 10,
    }
    assert container["progress"] == [
        {
            "name": "store_restore_bytes",
            "labels": {"store": "counts", "task": "Partition 1"},
            "value": 1200.0,
            "count": 0,
        }
    ]
    assert container["failures"]["dead_lettered"] == 3
    assert document["watermarks"] == [
        {
            "container": "0",
            "name": "watermark",
            "labels": {"partition": "1", "stream": "in", "system": "log", "task": "Partition 1"},
            "value": 5000.0,
        }
    ]
    assert document["model"] == {
        "generation": 1,
        "containers": {"0": {"tasks": {"Partition 0": ["log.in.0"], "Partition 1": ["log.in.1"]}}},
    }
    assert "executor" not in container  # in process: no Spark executor
