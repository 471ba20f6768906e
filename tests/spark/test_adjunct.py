"""Adjunct data stores through the Spark runner: bootstrap before processing, one store per task
(partitioned) or per container (broadcast), a restart that continues its stores, and a running job
switching to a newly sealed version while it reads."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.storage.layout import StoreLayout
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, end_version, job_config, seal

pytestmark = pytest.mark.spark

RATES = SystemStream("log", "rates")
PARTITIONS = 4
CURRENCIES = 400


def config_for(tmp_path: Path, **extra: Any) -> Settings:
    settings: dict[str, Any] = {
        "job__container__count": 2,
        "stores__rates__adstore__input": "log.rates",
        "stores__rates__key__serde": "string",
        "stores__rates__msg__serde": "json",
        "systems__log__streams__rates__samza__bootstrap": "true",
    }
    settings.update(extra)
    config = job_config(tmp_path, "tests.adjunct.jobs:Enrich", **settings)
    for name in ("in", "out", "rates"):
        create_stream(config, name, PARTITIONS)
    return config


def run_with_input(config: Settings, spark: Any, stream: str, keys: list[str]) -> JobResult:
    create_stream(config, stream, PARTITIONS)
    config = config.with_overrides({"task.inputs": f"log.{stream}"})
    write_stream(config, SystemStream("log", stream), [(key, i) for i, key in enumerate(keys)])
    seal(config, stream)
    result = SparkJobRunner(config, spark=spark).run()
    assert result.outcome == "finished", result.error
    return result


def enriched(config: Settings) -> dict[str, Any]:
    return {
        key: rate for pairs in read_stream(config, SystemStream("log", "out")).values() for _, (key, _, rate) in pairs
    }


def test_partitioned_stores_bootstrap_before_processing_one_per_task(spark_local, tmp_path):
    config = config_for(tmp_path)
    write_stream(config, RATES, [(f"c{i}", i) for i in range(CURRENCIES)])
    result = run_with_input(config, spark_local, "in", [f"c{i}" for i in range(CURRENCIES)])
    assert enriched(config) == {f"c{i}": i for i in range(CURRENCIES)}
    assert sum(c.adjunct_stored for c in result.containers) == CURRENCIES
    assert len({c.pid for c in result.containers}) == 2
    layout = StoreLayout.of(config)
    assert all(layout.store_dir("rates", f"Partition {p}", False).is_dir() for p in range(PARTITIONS))


def test_broadcast_stores_are_one_per_container_each_with_every_key(spark_local, tmp_path):
    config = config_for(tmp_path, task__broadcast__inputs=f"log.rates#[0-{PARTITIONS - 1}]")
    write_stream(config, RATES, [(f"c{i}", i) for i in range(CURRENCIES)])
    result = run_with_input(config, spark_local, "in", [f"c{i}" for i in range(CURRENCIES)])
    assert enriched(config) == {f"c{i}": i for i in range(CURRENCIES)}
    assert sorted(c.adjunct_stored for c in result.containers) == [CURRENCIES, CURRENCIES]
    layout = StoreLayout.of(config)
    assert layout.store_dir("rates", "container-0", False).is_dir()
    assert layout.store_dir("rates", "container-1", False).is_dir()


def test_a_restart_continues_valid_stores_from_their_own_offsets(spark_local, tmp_path):
    config = config_for(tmp_path)
    write_stream(config, RATES, [(f"c{i}", i) for i in range(CURRENCIES)])
    run_with_input(config, spark_local, "in", ["c1"])
    write_stream(config, RATES, [("c1", "updated"), ("new", "n")])
    result = run_with_input(config, spark_local, "in2", ["c1", "c2", "new"])
    assert sum(c.adjunct_stored for c in result.containers) == 2
    assert enriched(config) == {"c1": "updated", "c2": 2, "new": "n"}


def test_a_running_job_switches_to_a_newly_sealed_version(spark_local, tmp_path):
    config = config_for(tmp_path, stores__rates__adstore__versioned="true", task__commit__ms=200)
    write_stream(config, RATES, [(f"c{i}", "v1") for i in range(CURRENCIES)])
    end_version(config, RATES, "v1")
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()), daemon=True)
    thread.start()
    try:
        seen = probe_until(config, "c7", "v1")
        write_stream(config, RATES, [(f"c{i}", "v2") for i in range(0, CURRENCIES, 2)])  # v2 has half the keys
        assert probe_until(config, "c7", "v1", rounds=3)[-1] == "v1"  # v2 is not sealed: still v1
        end_version(config, RATES, "v2")
        seen = probe_until(config, "c8", "v2")
        assert seen[-1] == "v2"
        assert probe_until(config, "c7", None)[-1] is None  # the whole of v1 was replaced
    finally:
        runner.request_stop()
        thread.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error


def probe_until(config: Settings, key: str, expected: Any, rounds: int = 200) -> list[Any]:
    """Send ``key`` through the job until its output shows ``expected`` (or ``rounds`` probes went)."""
    seen: list[Any] = []
    for attempt in range(rounds):
        marker = f"{key}"
        write_stream(config, SystemStream("log", "in"), [(marker, attempt)])
        time.sleep(0.25)
        outputs = [
            value
            for pairs in read_stream(config, SystemStream("log", "out"), idle_timeout=0.2).values()
            for _, value in pairs
        ]
        seen = [rate for out_key, _, rate in outputs if out_key == key]
        if seen and seen[-1] == expected:
            return seen
    return seen


def test_a_running_job_switches_to_a_version_bulk_built_by_spark(spark_local, tmp_path):
    from millstream.spark.builds.adstore_build import build_version

    config = config_for(
        tmp_path, stores__rates__adstore__versioned="true", stores__rates__adstore__version__poll__ms=200
    )
    write_stream(config, RATES, [(f"c{i}", "streamed") for i in range(CURRENCIES)])
    end_version(config, RATES, "v1")
    dataset = str(tmp_path / "rates.parquet")
    spark_local.createDataFrame(
        [(f"c{i}", f"bulk-{i}") for i in range(0, CURRENCIES, 3)], ["key", "value"]
    ).write.parquet(dataset)
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()), daemon=True)
    thread.start()
    try:
        assert probe_until(config, "c3", "streamed")[-1] == "streamed"
        record = build_version(spark_local, config, "rates", dataset, "parquet")
        assert record.records == len(range(0, CURRENCIES, 3))
        assert probe_until(config, "c3", "bulk-3")[-1] == "bulk-3"
        assert probe_until(config, "c4", None)[-1] is None  # the bulk version replaced the streamed one whole
    finally:
        runner.request_stop()
        thread.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error


def test_a_high_level_join_with_an_adjunct_table_through_spark(spark_local, tmp_path):
    from tests.api.apps import app_config

    config = app_config(tmp_path, "tests.adjunct.jobs:EnrichApp", job__container__count=2)
    for name in ("in", "out", "rates"):
        create_stream(config, name, PARTITIONS)
    write_stream(config, RATES, [(f"c{i}", i) for i in range(CURRENCIES)] + [("c5", None)])  # null deletes
    inputs = [(f"c{i}", {"currency": f"c{i}", "n": i}) for i in range(CURRENCIES)]
    write_stream(config, SystemStream("log", "in"), inputs)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    out = {
        currency: rate
        for pairs in read_stream(config, SystemStream("log", "out")).values()
        for _, (currency, _, rate) in pairs
    }
    assert out == {f"c{i}": (None if i == 5 else i) for i in range(CURRENCIES)}


def test_an_extractor_projects_records_into_a_broadcast_store_through_spark(spark_local, tmp_path):
    config = config_for(
        tmp_path,
        task__broadcast__inputs=f"log.rates#[0-{PARTITIONS - 1}]",
        stores__rates__adstore__key__value__extractor__factory="tests.adjunct.jobs:CurrencyOnlyFactory",
    )
    records = [(f"row{i}", {"currency": f"c{i}", "rate": i, "source": "ecb"}) for i in range(CURRENCIES)]
    records.append(("row-x", {"currency": "c7", "deleted": True}))
    write_stream(config, RATES, records, partition=0)
    run_with_input(config, spark_local, "in", [f"c{i}" for i in range(CURRENCIES)])
    assert enriched(config) == {f"c{i}": (None if i == 7 else i) for i in range(CURRENCIES)}
