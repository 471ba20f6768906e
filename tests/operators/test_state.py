"""Store-backed operator state: the same behaviour as the in-memory state, with only changed keys written."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.operators.state import (
    CONTROL_STATE_KEY,
    InMemoryState,
    StoreBackedState,
    StoreControlState,
    decode_key,
    encode_key,
)
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import TaskKeyValueStore


def store(changes: list[tuple[bytes, bytes | None]] | None = None) -> TaskKeyValueStore:
    writer = None if changes is None else (lambda key, value: changes.append((key, value)))
    return TaskKeyValueStore("Partition 0", "operator-state", InMemoryKeyValueStorageEngine(), changelog=writer)


keys = st.one_of(
    st.text(max_size=4),
    st.integers(-(2**40), 2**40),
    st.tuples(st.integers(0, 100), st.integers(0, 100), st.one_of(st.none(), st.text(max_size=3))),
)
operations = st.lists(st.tuples(st.sampled_from(["put", "delete", "flush"]), keys, st.integers()), max_size=60)


@settings(max_examples=60, deadline=None)
@given(operations, st.integers(1, 5))
def test_a_store_backed_state_holds_what_the_in_memory_state_holds_after_any_operations(ops, cache_size):
    reference = InMemoryState("w")
    state = StoreBackedState(store(), "w", cache_size=cache_size)
    for action, key, value in ops:
        if action == "put":
            reference.put(key, [value])
            state.put(key, [value])
        elif action == "delete":
            reference.delete(key)
            state.delete(key)
        else:
            state.flush()
        assert state.get(key) == reference.get(key)
    assert dict(state.items()) == dict(reference.items())
    assert len(state) == len(reference)


def test_equal_keys_built_apart_encode_to_the_same_bytes_and_decode_back():
    shared = "".join(["a", "b"])
    left = ("u1", 10, (shared, shared))
    right = ("u1", 10, ("".join(["a", "b"]), "".join(["a", "b"])))
    assert left[2][0] is left[2][1] and right[2][0] is not right[2][1]
    assert encode_key(left) == encode_key(right)
    assert encode_key(left)[:1] == b"\x01"
    assert decode_key(encode_key(left)) == left
    assert decode_key(encode_key(frozenset({1, 2}))) == frozenset({1, 2})  # not plain data: pickled


def test_only_the_last_value_of_a_hot_key_reaches_the_changelog_at_a_flush():
    changes: list[tuple[bytes, bytes | None]] = []
    state = StoreBackedState(store(changes), "w")
    for count in range(1, 1001):
        state.put("hot", [count, False])
    state.put("cold", [1, False])
    assert changes == []
    state.flush()
    assert len(changes) == 2
    assert state.get("hot") == [1000, False]


def test_operators_sharing_a_store_keep_apart_by_prefix_and_never_see_the_control_state():
    shared = store()
    first, second = StoreBackedState(shared, "window-1"), StoreBackedState(shared, "window-10")
    control = StoreControlState(shared, "Partition 0", first.flush)
    first.put("k", 1)
    second.put("k", 2)
    control.save({"offsets": {"log.in.0": "7"}})
    assert list(first.items()) == [("k", 1)]
    assert list(second.items()) == [("k", 2)]
    assert shared.get(CONTROL_STATE_KEY) is not None


def test_the_control_state_is_written_after_the_operators_cached_changes_and_read_back():
    changes: list[tuple[bytes, bytes | None]] = []
    shared = store(changes)
    state = StoreBackedState(shared, "w")
    control = StoreControlState(shared, "Partition 0", state.flush)
    state.put("k", [1, False])
    control.save({"offsets": {"log.in.0": "7"}, "operators": {}})
    assert [key for key, _ in changes][-1] == CONTROL_STATE_KEY
    assert control.load() == {"offsets": {"log.in.0": "7"}, "operators": {}, "format": 1}


def test_a_task_whose_store_holds_no_control_state_yet_reads_the_metadata_stores_once():
    earlier: dict[str, Any] = {"offsets": {"log.in.0": "3"}, "format": 1}
    control = StoreControlState(store(), "Partition 0", lambda: None, fallback=lambda: earlier)
    assert control.load() == earlier


def test_a_whole_state_snapshot_of_an_earlier_version_is_loaded_into_the_store():
    before = InMemoryState("w")
    before.put((0, 10, "u"), [3, False])
    state = StoreBackedState(store(), "w")
    state.put("stale", 1)
    state.restore(before.snapshot())
    assert dict(state.items()) == {(0, 10, "u"): [3, False]}
    assert state.snapshot() is None
