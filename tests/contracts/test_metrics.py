"""The registry the runtime and tasks write to, and the snapshot that carries it to the driver."""

from __future__ import annotations

import pytest

from millstream.contracts.metrics import NOOP_METRICS, Registry, ScopedRegistry, metric_name
from millstream.contracts.metrics_snapshot import ContainerSnapshot


def test_instruments_are_found_again_by_name_and_labels() -> None:
    registry = Registry({"container": "0"})
    registry.counter("processed", task="Partition 0").inc()
    registry.counter("processed", task="Partition 0").inc(2)
    registry.counter("processed", task="Partition 1").inc()
    registry.gauge("lag", task="Partition 0").set(7)
    timer = registry.timer("commit", task="Partition 0")
    timer.update(0.5)
    timer.update(1.5)

    samples = {(s.name, s.labels): s for s in registry.snapshot()}

    assert samples[("processed", (("container", "0"), ("task", "Partition 0")))].value == 3
    assert samples[("processed", (("container", "0"), ("task", "Partition 1")))].value == 1
    assert samples[("lag", (("container", "0"), ("task", "Partition 0")))].value == 7
    commit = samples[("commit", (("container", "0"), ("task", "Partition 0")))]
    assert (commit.kind, commit.count, commit.value, commit.max) == ("timer", 2, 2.0, 1.5)


def test_a_name_used_for_one_kind_is_refused_for_another() -> None:
    registry = Registry()
    registry.counter("x")
    with pytest.raises(TypeError, match="already a counter"):
        registry.gauge("x")


def test_a_scoped_registry_adds_its_labels_and_prefix() -> None:
    registry = Registry({"container": "1"})
    scoped = ScopedRegistry(registry, {"task": "t"}, prefix="user_")
    scoped.counter("enriched").inc()
    with scoped.scoped(kind="a").timer("lookup").time():
        pass

    names = {(s.name, s.labels) for s in registry.snapshot()}

    assert ("user_enriched", (("container", "1"), ("task", "t"))) in names
    assert ("user_lookup", (("container", "1"), ("kind", "a"), ("task", "t"))) in names


def test_derived_series_and_refreshes_are_read_at_snapshot_time() -> None:
    registry = Registry()
    counts = {"commits": 0}
    registry.derived("commits", "counter", lambda: counts["commits"], task="t")
    registry.before_snapshot(lambda: registry.gauge("lag").set(counts["commits"] * 10))
    counts["commits"] = 4

    samples = {s.name: s for s in registry.snapshot()}

    assert samples["commits"].value == 4 and samples["commits"].kind == "counter"
    assert samples["lag"].value == 40


def test_the_noop_registry_records_nothing_and_needs_no_checks() -> None:
    NOOP_METRICS.counter("a").inc()
    NOOP_METRICS.gauge("b").set(3)
    NOOP_METRICS.timer("c").update(1.0)
    with NOOP_METRICS.scoped(task="t").timer("d").time():
        pass
    assert not NOOP_METRICS.enabled
    assert NOOP_METRICS.counter("a").value == 0 and NOOP_METRICS.timer("c").count == 0


def test_names_are_made_acceptable_to_prometheus() -> None:
    assert metric_name("orders.enriched-ok") == "orders_enriched_ok"
    assert metric_name("2xx") == "_2xx"


def test_a_snapshot_survives_its_trip_through_the_store() -> None:
    registry = Registry({"container": "0"})
    registry.counter("processed", task="t", partition="3").inc(5)
    registry.timer("commit", task="t").update(0.25)
    snapshot = ContainerSnapshot("0", 2, 3, 1_700_000_000_000, "running", registry.snapshot())

    assert ContainerSnapshot.from_bytes(snapshot.to_bytes()) == snapshot
