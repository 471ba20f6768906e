"""Through the Spark runner: a job claiming a changelog another job owns exits with the refusal (exit code 2)
from the driver, before any container starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millstream.cli.common import exit_code_of
from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.contracts.systems import StreamOwnedError
from millstream.spark.run.runner import SparkJobRunner
from tests.storage.backends.changelog.test_ownership import job, prepare_input, run_to_end

pytestmark = pytest.mark.spark


def test_a_job_claiming_an_owned_changelog_is_refused_before_any_container_starts(
    spark_local: SparkSession, tmp_path: Path
) -> None:
    original = job(tmp_path, "counts")
    prepare_input(original)
    run_to_end(original)
    copy = job(tmp_path, "counts-copy")
    with pytest.raises(StreamOwnedError, match="owned by store 'counts' of job 'counts-1'") as refused:
        SparkJobRunner(copy, spark=spark_local).run()
    assert exit_code_of(refused.value) == 2
    assert coordination.latest_job_model(metadata_store(copy)) is None
