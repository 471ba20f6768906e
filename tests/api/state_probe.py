"""Read the control state a high-level job's tasks persisted, wherever it lives: the metadata store for a
job without stateful operators, the operator store's changelog (its latest control-state record per
partition, written at each commit before the checkpoint) for a job with them."""

from __future__ import annotations

from typing import Any

import msgpack

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, parse_stream
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.errors import StreamNotFoundError
from millstream.operators.state import CONTROL_STATE_KEY
from millstream.operators.stores import OPERATOR_STORE, has_operator_store
from millstream.storage.changelog_partitions import changelog_partitions
from millstream.testing import iter_stream


def persisted_control_states(config: Settings) -> dict[str, dict[str, Any]]:
    """Task name -> the last control state it persisted."""
    store = metadata_store(config)
    store.init()
    try:
        raws = store.all(CONTROL_STATE_NAMESPACE)
        tasks = {partition: str(task) for task, partition in changelog_partitions(store).items()}
    finally:
        store.close()
    if not has_operator_store(config):
        return {task: msgpack.unpackb(raw, strict_map_key=False) for task, raw in raws.items()}
    changelog = config.view(StoreConfig, OPERATOR_STORE).changelog
    assert changelog is not None, "the operator store has no changelog"
    latest: dict[int, bytes] = {}
    try:
        for partition, envelopes in iter_stream(config, parse_stream(changelog, "changelog"), idle_timeout=0.2):
            for envelope in envelopes:
                if envelope.key == CONTROL_STATE_KEY and envelope.message is not None:
                    latest[partition] = envelope.message
    except StreamNotFoundError:
        return {}  # the job has not created it yet
    return {tasks[partition]: msgpack.unpackb(raw, strict_map_key=False) for partition, raw in latest.items()}
