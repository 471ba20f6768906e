"""The startpoints example on the Spark runner: a timestamp startpoint set with ``--apply`` on a running
job re-reads exactly the records of its partition written at or after the instant."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_a_timestamp_startpoint_rewinds_one_partition_of_the_running_job(example, spark_local, tmp_path, capsys):
    run = example("startpoints")

    assert run.main(["--data-dir", str(tmp_path / "data")], spark=spark_local) == 0
    assert "partition 1 offset  4 (afternoon) read 2x" in capsys.readouterr().out
