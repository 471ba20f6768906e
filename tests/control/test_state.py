"""Persisting a task's control state in the metadata store, fenced like checkpoints."""

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.control.errors import ControlStateError
from millstream.control.state import CONTROL_STATE_NAMESPACE, ControlStateStore


@pytest.fixture
def store(tmp_path):
    store = metadata_store(Settings({"job.data.dir": str(tmp_path)}))
    store.init()
    yield store
    store.close()


def test_a_saved_state_loads_back_with_binary_values(store):
    states = ControlStateStore(store, "Partition 0")
    assert states.load() is None
    states.save({"offsets": {"log.in.0": "7"}, "window": b"\x00\x01"})
    loaded = states.load()
    assert loaded is not None
    assert loaded["offsets"] == {"log.in.0": "7"} and loaded["window"] == b"\x00\x01"


def test_a_fenced_writer_cannot_overwrite_the_state_of_a_newer_attempt(store):
    coordination.publish_generation(store, 1)
    first = coordination.start_container_attempt(store, "0")
    zombie = ControlStateStore(store, "Partition 0", coordination.writer_expectation(1, "0", first))
    zombie.save({"who": "first"})
    second = coordination.start_container_attempt(store, "0")
    current = ControlStateStore(store, "Partition 0", coordination.writer_expectation(1, "0", second))
    current.save({"who": "second"})
    with pytest.raises(FencedError, match="Partition 0"):
        zombie.save({"who": "zombie"})
    loaded = current.load()
    assert loaded is not None and loaded["who"] == "second"


def test_an_unreadable_state_is_an_error_naming_the_task(store):
    store.put(CONTROL_STATE_NAMESPACE, "Partition 3", b"\xc1garbage")
    with pytest.raises(ControlStateError, match="Partition 3"):
        ControlStateStore(store, "Partition 3").load()
