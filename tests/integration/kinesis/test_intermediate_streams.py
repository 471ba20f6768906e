"""A high-level application cannot put its intermediate streams on Kinesis: shards come and go and sequence numbers
have no origin, so neither ``partition_by`` nor a fresh downstream stage's completeness check could hold. The job
is refused before it starts, naming the key, and leaves nothing behind on Kinesis."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from tests.integration.kinesis.helpers import kinesis_values, raw_client

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("stage", [None, "0", "1"], ids=["whole-app", "stage-0", "stage-1"])
def test_an_application_with_its_intermediate_streams_on_kinesis_is_refused_naming_the_key(
    kinesis_endpoint: str, tmp_path: Path, stage: str | None
) -> None:
    values = {
        **kinesis_values(kinesis_endpoint),
        "job.name": "kinesis-app",
        "job.data.dir": str(tmp_path),
        "app.class": "tests.api.apps:RepartitionPassThrough",
        "app.intermediate.system": "kinesis",
        **({"app.stage": stage} if stage is not None else {}),
    }
    with pytest.raises(ConfigError) as refused:
        prepare(Settings(values))  # what every runner and the command do with a config before a job starts
    assert str(refused.value) == (
        "config key 'app.intermediate.system': system 'kinesis' cannot hold the intermediate stream "
        "'kinesis.kinesis-app-1-by-user': its partitions come and go at run time and its offsets have no fixed "
        "origin, so partition_by could not keep a key in one partition and a downstream stage could not tell a "
        "complete stream from one that lost records; put intermediate streams on a Kafka or log system "
        "(app.intermediate.system)"
    )
    streams = raw_client(kinesis_endpoint).list_streams()["StreamNames"]
    assert not [name for name in streams if "by-user" in name]
