"""``millstream job stop`` refuses, writing nothing, a job that is not running (its graceful stop of a running
job is tested where no signal reaches the driver: YARN cluster mode, tests/spark/run/test_yarn_submit.py)."""

from __future__ import annotations

from pathlib import Path

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.coordinator.prepare import load_job_config
from tests.cli.test_main import millstream, write_config
from tests.helpers import create_stream


def test_job_stop_of_a_job_that_is_not_running_exits_2_and_writes_no_stop_signal(tmp_path: Path):
    path = write_config(tmp_path)
    config = load_job_config(path)
    create_stream(config, "in", 1)

    stopped = millstream("job", "stop", path)

    assert stopped.returncode == 2, stopped.stdout + stopped.stderr
    assert "job 'cli-test' is not running (generation 0" in " ".join(stopped.stderr.split()), stopped.stderr
    store = metadata_store(config)
    try:
        assert not coordination.stop_requested(store, 0)
    finally:
        store.close()
