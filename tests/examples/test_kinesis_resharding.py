"""The Kinesis resharding example on the Spark runner against kinesalite: a split and a merge under a
running job lose no record, keep each key's order, and read parents before children."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_split_and_a_merge_under_a_running_job_keep_every_order_in_order(
    example, spark_local, kinesis_endpoint, tmp_path, capsys
):
    run = example("kinesis_resharding")
    arguments = ["--endpoint", kinesis_endpoint, "--stream", f"orders-{tmp_path.name}", "--data-dir", str(tmp_path)]

    assert run.main(arguments, spark=spark_local) == 0
    assert "shardId-000000000004 (parents shardId-000000000003, shardId-000000000001)" in capsys.readouterr().out
