"""The adjunct loop's own metrics: bootstrap progress, messages stored and the version each store serves."""

from __future__ import annotations

from millstream.adjunct.loop import AdjunctLoop
from millstream.composition.metadata import metadata_store
from millstream.contracts.metrics_snapshot import read_snapshots
from millstream.systems.consumers import SystemConsumers
from millstream.testing import write_stream
from tests.adjunct.test_manager import RATES, adjunct_config, run, streams
from tests.helpers import end_version


def test_a_bootstrapped_versioned_store_shows_its_progress_and_serving_version(tmp_path) -> None:
    config = adjunct_config(
        tmp_path, stores__rates__adstore__versioned="true", metrics__enabled="true", job__container__count=1
    )
    streams(config)
    write_stream(config, RATES, [(f"c{i}", "v1") for i in range(40)])
    end_version(config, RATES, "v1")
    result = run(config, [("c1", 1)])

    with metadata_store(config) as store:
        (snapshot,) = read_snapshots(store).values()
    series = {(s.name, tuple(sorted(dict(s.labels).items()))): s.value for s in snapshot.samples}

    def values(name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: value for (n, labels), value in series.items() if n == name}

    remaining = values("adjunct_bootstrap_remaining_messages")
    assert len(remaining) == 2 and set(remaining.values()) == {0}  # both partitions of log.rates caught up
    assert sum(values("adjunct_stored_messages").values()) == sum(c.adjunct_stored for c in result.containers) >= 40
    assert set(values("adjunct_bootstrapping").values()) == {0}
    assert all(value >= 0 for value in values("adjunct_bootstrap_duration_seconds").values())
    versions = {dict(labels)["version"]: value for labels, value in values("adjunct_serving_version").items()}
    assert versions == {"v1": 1}


class SwitchingVersions:
    """Just what the loop's measurements read of a manager: no bootstrap, one versioned store."""

    bootstrap_ssps: frozenset = frozenset()

    def __init__(self) -> None:
        self.version: str | None = None

    def serving_versions(self) -> dict[tuple[str, str], str | None]:
        return {("rates", "Partition 0"): self.version}


def test_a_new_serving_version_turns_the_previous_ones_gauge_to_zero() -> None:
    manager = SwitchingVersions()
    consumers = SystemConsumers({})
    loop = AdjunctLoop(manager, consumers, {}, {}, {}, commit_ms=1000, poll_interval_ms=10)  # type: ignore[arg-type]

    def versions() -> list[tuple[str, float]]:
        return [
            (dict(labels)["version"], value)
            for name, _, labels, value in loop.measurements()
            if name == "adjunct_serving_version"
        ]

    assert versions() == []  # nothing serving yet
    manager.version = "v1"
    assert versions() == [("v1", 1)]
    assert versions() == []  # unchanged: the gauge keeps its value
    manager.version = "v2"
    assert versions() == [("v1", 0), ("v2", 1)]
