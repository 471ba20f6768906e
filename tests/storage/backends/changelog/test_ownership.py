"""A changelog is owned by the one job and store that first used it, recorded beside the stream on the
embedded log: a copied config (another ``job.name``) or a second store naming it is refused at start,
naming both owners, before any container writes; the owner restarting is accepted; a takeover hands it
over on purpose. (The same on a real Kafka broker: tests/integration/kafka/test_changelog_ownership.py.)"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.systems import StreamOwnedError, StreamSpec
from millstream.coordinator.driver_loop import DriverLoop
from millstream.coordinator.prepare import prepare
from millstream.coordinator.thread_launcher import ThreadLauncher
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, seal
from tests.storage.harness import state_config

TASK_CLASS = "tests.storage.jobs:CountPerKeyReportingAtEnd"
CHANGELOG = SystemStream("log", "counts-changelog")


def job(tmp_path: Path, name: str, **extra: Any) -> Settings:
    """A job counting ``log.in`` into store ``counts`` with changelog ``log.counts-changelog``; jobs of one
    ``tmp_path`` share the log (and so the changelog) but not their metadata stores."""
    return state_config(tmp_path, "changelog", task=TASK_CLASS, job__name=name, task__commit__ms=50, **extra)


def prepare_input(config: Settings) -> None:
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    fill(config, "in", 2, 10)
    seal(config, "in")


def run_to_end(config: Settings) -> None:
    result = InProcessRunner(config).run(timeout=90)
    assert result.outcome == "finished", result.error


def changelog_records(config: Settings) -> int:
    return sum(len(pairs) for pairs in read_stream(config, CHANGELOG).values())


def test_a_copied_config_naming_the_same_changelog_is_refused_naming_both_owners(tmp_path: Path) -> None:
    original = job(tmp_path, "counts")
    prepare_input(original)
    run_to_end(original)
    written = changelog_records(original)
    copy = job(tmp_path, "counts-copy")
    with pytest.raises(StreamOwnedError) as refused:
        InProcessRunner(copy).run(timeout=90)
    message = str(refused.value)
    assert "'log.counts-changelog'" in message
    assert "store 'counts' of job 'counts-1'" in message
    assert "store 'counts' of job 'counts-copy-1'" in message
    assert "stores.counts.changelog.owner.takeover=true" in message
    assert refused.value.exit_code == 2
    assert coordination.latest_job_model(metadata_store(copy)) is None  # no container was ever started
    assert changelog_records(original) == written


def test_the_owner_restarting_is_accepted(tmp_path: Path) -> None:
    config = job(tmp_path, "counts")
    prepare_input(config)
    run_to_end(config)
    run_to_end(config)
    assert coordination.latest_job_model(metadata_store(config)) is not None


def test_another_job_id_of_the_same_job_name_is_another_owner(tmp_path: Path) -> None:
    config = job(tmp_path, "counts")
    prepare_input(config)
    run_to_end(config)
    with pytest.raises(StreamOwnedError, match="job 'counts-2'"):
        InProcessRunner(job(tmp_path, "counts", job__id="2")).run(timeout=90)


def test_two_stores_of_one_job_on_one_changelog_are_refused_by_the_config_check(tmp_path: Path) -> None:
    config = job(
        tmp_path, "counts", stores__totals__factory="rocksdb", stores__totals__changelog="log.counts-changelog"
    )
    with pytest.raises(
        ConfigError, match=re.escape("stores 'counts' and 'totals' both name changelog 'log.counts-changelog'")
    ):
        prepare(config)


def test_two_stores_of_one_job_on_one_changelog_are_refused_at_start_without_the_config_check(
    tmp_path: Path,
) -> None:
    """The record refuses it too, whatever bypasses config validation (the stores claim in name order)."""
    config = job(
        tmp_path, "counts", stores__totals__factory="rocksdb", stores__totals__changelog="log.counts-changelog"
    )
    prepare_input(config)
    store = metadata_store(config)  # the driver's loop on the raw config: the runners would refuse it first
    with pytest.raises(StreamOwnedError) as refused:
        DriverLoop(config, store, ThreadLauncher(config, store, threading.Event())).run()
    assert "owned by store 'counts' of job 'counts-1'; store 'totals' of job 'counts-1'" in str(refused.value)


def test_a_takeover_hands_the_changelog_over_and_refuses_the_old_owner(tmp_path: Path) -> None:
    original = job(tmp_path, "counts")
    prepare_input(original)
    run_to_end(original)
    successor = job(tmp_path, "counts-v2")
    run_to_end(successor.with_overrides({"stores.counts.changelog.owner.takeover": "true"}))
    run_to_end(successor)  # the key removed again: the successor is the owner now
    with pytest.raises(StreamOwnedError, match="owned by store 'counts' of job 'counts-v2-1'"):
        InProcessRunner(original).run(timeout=90)


def test_a_deleted_changelog_is_released_with_its_data(tmp_path: Path) -> None:
    original = job(tmp_path, "counts")
    prepare_input(original)
    run_to_end(original)
    with system_factory(original, "log").get_admin("log", original) as admin:
        assert admin.clear_stream(StreamSpec("log", CHANGELOG.stream))
    run_to_end(job(tmp_path, "counts-copy"))
