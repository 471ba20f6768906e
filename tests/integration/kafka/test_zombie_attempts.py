"""On the real broker: a superseded attempt of a container that keeps running cannot get its changelog
writes covered by the newer attempt's checkpoints. The newer attempt's transactional producer fences it
(same ``transactional.id``): its open transaction is aborted, its next commit raises, and a restore from
the newer attempt's checkpoint — reading committed records only — gives exactly the fault-free counts."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from millstream.systems.base import WriterFencedError
from millstream.systems.kafka.factory import MAX_TRANSACTION_TIMEOUT_MS, transaction_timeout_ms
from tests.runtime.test_zombie_attempts import KEYS, reported_stores, run_with_a_zombie

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("factory", ["inmemory", "rocksdb"])
def test_a_zombie_attempts_kafka_changelog_writes_are_aborted_and_a_restore_gives_exact_counts(
    tmp_path: Path, bootstrap: str, topic_name: Callable[[str], str], factory: str
) -> None:
    job = f"zombie-{uuid.uuid4().hex[:8]}"
    config, zombie_error, restored = run_with_a_zombie(
        tmp_path,
        factory,
        job__name=job,
        stores__counts__changelog=f"kafka.{topic_name('changelog')}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
    )
    assert restored.outcome == "finished"
    *_, restored_store = reported_stores(config)
    assert restored_store == dict(Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5}))
    assert isinstance(zombie_error, WriterFencedError), zombie_error
    assert f"transactional.id millstream-producer-{job}-1-0: container 0 attempt 1 of generation 1" in str(zombie_error)


def test_a_containers_transaction_outlives_its_commit_interval_within_what_brokers_accept() -> None:
    assert transaction_timeout_ms(60_000) == 180_000  # the default task.commit.ms
    assert transaction_timeout_ms(200) == 60_000
    assert transaction_timeout_ms(3_600_000) == MAX_TRANSACTION_TIMEOUT_MS
