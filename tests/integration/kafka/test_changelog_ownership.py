"""Changelog ownership on a real Kafka broker: the owner is recorded on the cluster (``__millstream-owners``),
so a copied config (another ``job.name``, its own metadata store) naming the same changelog topic is refused
at start naming both owners; the owner restarting is accepted; a takeover hands the topic over; of two
claims racing for an unowned topic exactly one wins. A store naming no changelog gets a derived topic on the
inputs' cluster."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.contracts import coordination
from millstream.contracts.systems import StreamOwnedError, StreamOwner, StreamSpec
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.testing import InProcessRunner
from tests.integration.kafka.helpers import create_topic
from tests.integration.kafka.helpers import job_config as kafka_job_config
from tests.storage.backends.changelog.test_ownership import TASK_CLASS, prepare_input, run_to_end
from tests.storage.harness import state_config

pytestmark = pytest.mark.integration


def job(tmp_path: Path, bootstrap: str, changelog: str, name: str, **extra: Any) -> Settings:
    """Jobs of one ``tmp_path`` share the log input; each has its own SQLite metadata store."""
    return state_config(
        tmp_path,
        "changelog",
        task=TASK_CLASS,
        task__commit__ms=50,
        job__name=name,
        stores__counts__changelog=f"kafka.{changelog}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        **extra,
    )


def test_a_copied_config_naming_the_same_changelog_topic_is_refused_naming_both_owners(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    name = f"counts-{uuid.uuid4().hex[:8]}"
    original = job(tmp_path, bootstrap, changelog, name)
    prepare_input(original)
    run_to_end(original)
    run_to_end(original)  # the owner restarting is accepted
    copy = job(tmp_path, bootstrap, changelog, f"{name}-copy")
    with pytest.raises(StreamOwnedError) as refused:
        InProcessRunner(copy).run(timeout=90)
    message = str(refused.value)
    assert f"'kafka.{changelog}'" in message
    assert f"owned by store 'counts' of job '{name}-1'; store 'counts' of job '{name}-copy-1'" in message
    assert "stores.counts.changelog.owner.takeover=true" in message
    assert coordination.latest_job_model(metadata_store(copy)) is None


def test_a_takeover_on_kafka_hands_the_topic_over_and_refuses_the_old_owner(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    name = f"counts-{uuid.uuid4().hex[:8]}"
    original = job(tmp_path, bootstrap, changelog, name)
    prepare_input(original)
    run_to_end(original)
    successor = job(tmp_path, bootstrap, changelog, f"{name}-v2")
    run_to_end(successor.with_overrides({"stores.counts.changelog.owner.takeover": "true"}))
    run_to_end(successor)
    with pytest.raises(StreamOwnedError, match=f"owned by store 'counts' of job '{name}-v2-1'"):
        InProcessRunner(original).run(timeout=90)


def test_of_two_claims_racing_for_an_unowned_topic_exactly_one_wins(bootstrap: str, topic_name: Any) -> None:
    topic = topic_name("raced")
    config = Settings(
        {"job.name": "claims", "systems.kafka.samza.factory": "kafka", "systems.kafka.bootstrap.servers": bootstrap}
    )
    admin = KafkaSystemFactory().get_admin("kafka", config)
    admin.create_stream(StreamSpec("kafka", topic, 1, {"cleanup.policy": "compact"}))
    claimants = [StreamOwner(f"job-{index}-1", "counts") for index in range(4)]

    def claim(owner: StreamOwner) -> str:
        with KafkaSystemFactory().get_admin("kafka", config) as own:
            try:
                own.claim_stream(topic, owner)
            except StreamOwnedError as error:
                return f"refused: {error.owner.job}"
            return "owner"

    with ThreadPoolExecutor(len(claimants)) as pool:
        outcomes = list(pool.map(claim, claimants))
    winner = claimants[outcomes.index("owner")].job
    assert sorted(outcomes) == ["owner", *[f"refused: {winner}"] * 3]
    assert admin.claim_stream(topic, claimants[outcomes.index("owner")]) == claimants[outcomes.index("owner")]


def test_a_store_without_a_changelog_name_gets_a_derived_topic_on_the_inputs_cluster(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    source = topic_name("in")
    create_topic(bootstrap, source, 2)
    name = f"counts-{uuid.uuid4().hex[:8]}"
    config = kafka_job_config(
        bootstrap, tmp_path, source, topic_name("out"), job__name=name, metadata__store__factory="sqlite",
        task__checkpoint__factory="metadata", stores__counts__factory="rocksdb",
        stores__counts__backup__factories="changelog",
    )  # fmt: skip
    derived = f"{name}-1-counts-changelog"
    assert config["stores.counts.changelog"] == f"kafka.{derived}"
    with metadata_store(config) as store:
        JobCoordinator(config, store).start()
    admin = KafkaSystemFactory().get_admin("kafka", config)
    assert admin.get_system_stream_metadata([derived])[derived].partition_count == 2
    assert admin.topic_config(derived)["cleanup.policy"] == "compact"
    assert admin.claim_stream(derived, StreamOwner(f"{name}-1", "counts")) == StreamOwner(f"{name}-1", "counts")
