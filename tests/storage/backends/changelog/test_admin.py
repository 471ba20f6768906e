"""The changelog stream the job creates for a store: compacted, with the store's replicas when it sets them."""

from __future__ import annotations

import json
from pathlib import Path

from millstream.config.views import StoreConfig
from millstream.storage.backends.changelog.admin import CHANGELOG_STREAM_CONFIG, _stream_config
from tests.storage.backends.changelog.test_ownership import CHANGELOG, changelog_records, job, prepare_input, run_to_end


def test_a_changelog_is_created_with_the_stores_compaction_lag_tombstone_retention_and_replicas_only_when_set() -> None:
    four_hours, one_day = str(4 * 60 * 60 * 1000), str(24 * 60 * 60 * 1000)
    assert _stream_config(StoreConfig.parse({}, "stores.s.")) == {
        **CHANGELOG_STREAM_CONFIG,
        "min.compaction.lag.ms": four_hours,
        "delete.retention.ms": one_day,
    }
    replicated = _stream_config(
        StoreConfig.parse(
            {
                "changelog.replication.factor": "3",
                "changelog.min.compaction.lag.ms": "60000",
                "changelog.delete.retention.ms": "7200000",
            },
            "stores.s.",
        )
    )
    assert replicated == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "60000",
        "delete.retention.ms": "7200000",
        "replication.factor": "3",
    }


def test_the_embedded_log_takes_a_stores_changelog_replicas_and_keeps_its_one_copy(tmp_path: Path) -> None:
    """The log has no replicas: the key, carried over from a Samza config, changes nothing there."""
    config = job(tmp_path, "counts", stores__counts__changelog__replication__factor=3)
    prepare_input(config)
    run_to_end(config)
    assert changelog_records(config) > 0


def test_the_embedded_log_is_not_given_a_stores_changelog_kafka_topic_configs(tmp_path: Path) -> None:
    """Samza applies ``stores.<s>.changelog.kafka.*`` to Kafka changelogs only; the log's stream config would take a
    ``retention.ms`` among them as its own and expire the changelog."""
    config = job(tmp_path, "counts", stores__counts__changelog__kafka__retention__ms="1")
    prepare_input(config)
    run_to_end(config)
    (stream_file,) = [path for path in tmp_path.rglob("stream.json") if path.parent.name == CHANGELOG.stream]
    assert "retention.ms" not in json.loads(stream_file.read_text())["config"]
    assert changelog_records(config) > 0
