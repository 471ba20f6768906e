"""Keyed user state: ``map_with_state`` / ``flat_map_with_state`` with a ``ValueState`` per key."""

from __future__ import annotations

import pytest

from millstream.api.application import InputDescriptor
from millstream.operators.graph import OperatorError
from tests.api.harness import SOURCE, Driver, application, task_graph

A0 = SOURCE.partition(0)


def count(message, state):
    state.set(state.get(0) + 1)
    return (message["user"], state.get())


def counting_app():
    return application(
        lambda app: (
            app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"]))
            .map_with_state(count, key=lambda m: m["user"], name="counts")
            .send_to("log.out")
        )
    )


def outputs(driver: Driver) -> list:
    return [envelope.message for envelope in driver.collector.to("log.out")]


def test_a_running_count_per_key_is_one_stateful_map():
    driver = Driver(task_graph(counting_app(), [A0]))
    for user in "abab":
        driver.source(A0, {"user": user, "ts": 1}, 0)
    assert outputs(driver) == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_keyed_values_survive_a_restart():
    before = Driver(task_graph(counting_app(), [A0]))
    for user in "aab":
        before.source(A0, {"user": user, "ts": 1}, 0)
    snapshot = before.checkpoint()
    assert snapshot is not None
    after = Driver(task_graph(counting_app(), [A0]))
    after.graph.restore(snapshot)
    after.offsets = dict(before.offsets)
    after.source(A0, {"user": "a", "ts": 2}, 0)
    assert outputs(after) == [("a", 3)]


def test_a_stateful_flat_map_deduplicates_and_clear_forgets_a_key():
    def first_of_each(message, state):
        if message == "reset":
            state.clear()
            return []
        if state.get() is None:
            state.set(True)
            return [message]
        return []

    app = application(
        lambda app: (
            app.input("log.in").flat_map_with_state(first_of_each, key=lambda m: "all", name="dedup").send_to("log.out")
        )
    )
    driver = Driver(task_graph(app, [A0]))
    for message in ["x", "x", "reset", "y", "x"]:
        driver.source(A0, message, 1)
    assert outputs(driver) == ["x", "y"]
    assert len(driver.graph.graph.impls["dedup"].state) == 1  # type: ignore[attr-defined]


def test_the_key_of_a_kv_is_the_default_and_a_non_kv_without_key_fails_naming_the_operator():
    keyed = application(
        lambda app: (
            app.input(InputDescriptor("log.in", kv=True))
            .map_with_state(lambda kv, state: state.key, name="keys")
            .send_to("log.out")
        )
    )
    driver = Driver(task_graph(keyed, [A0]))
    driver.source(A0, "v", 1, key="k1")
    assert outputs(driver) == ["k1"]

    unkeyed = application(
        lambda app: app.input("log.in").map_with_state(lambda m, state: m, name="needs-key").send_to("log.out")
    )
    driver = Driver(task_graph(unkeyed, [A0]))
    with pytest.raises(OperatorError, match=r"operator 'needs-key' failed: TypeError: .*give map_with_state a key="):
        driver.source(A0, "v", 1)
