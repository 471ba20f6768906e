"""``millstream job reset`` of a stateful application whose changelog, intermediate streams and checkpoints live
on the real broker: it deletes those topics and checkpoints (inputs and outputs stay), and the job runs again as
from scratch."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from millstream.coordinator.prepare import load_job_config
from tests.api.apps import reference_stateful, stateful_records, user_messages
from tests.cli.test_main import millstream, write_config
from tests.cli.test_reset import APP, checkpoints, outputs, run_once_on, run_to_the_end

pytestmark = pytest.mark.integration


def topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def test_a_reset_deletes_the_jobs_kafka_topics_and_checkpoints_and_the_job_starts_over(tmp_path, bootstrap, topic_name):
    job_id = topic_name("reset")
    values = {
        **APP,
        "job.id": job_id,
        "job.container.count": 2,
        "app.intermediate.system": "kafka",
        "task.checkpoint.factory": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": bootstrap,
    }
    path = write_config(tmp_path, values)
    config = load_job_config(path)
    # event times after the epoch: Kafka replaces a record timestamp of 0 with the current time
    data = {
        p: [(key, {**value, "ts": value["ts"] + 1_000_000}) for key, value in user_messages(p, 20)] for p in range(2)
    }
    first = run_once_on(config, data)
    owned = {f"cli-test-{job_id}-operator-state-changelog", f"cli-test-{job_id}-by-user", f"cli-test-{job_id}-evens"}
    assert owned <= topics(bootstrap)
    assert len(checkpoints(config)) == 2

    dry = millstream("job", "reset", path, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    for topic in owned:
        assert f"stream kafka.{topic} " in dry.stdout, (topic, dry.stdout)
    assert owned <= topics(bootstrap), "a dry run deletes nothing"

    done = millstream("job", "reset", path)
    assert done.returncode == 0, done.stderr
    assert not owned & topics(bootstrap), "the changelog and the intermediate topics are gone"
    assert checkpoints(config) == {}

    run_to_the_end(config)
    second = outputs(config)[len(first) :]
    assert stateful_records(second) == reference_stateful(data), "state and intermediate streams start over"
    assert len(second) == len(first)
