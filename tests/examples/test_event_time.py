"""The event-time example on the Spark runner: a two-stage application emits every window exactly once,
complete, when run as one job, as one job per stage, and when drained on an unbounded input."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_one_job_two_stage_jobs_and_a_drain_emit_every_window_once(example, spark_local, tmp_path, capsys):
    run = example("event_time")

    assert run.main(["--data-dir", str(tmp_path)], spark=spark_local) == 0
    out = capsys.readouterr().out
    assert "drained job: drained" in out and "stage 1 job: finished" in out
