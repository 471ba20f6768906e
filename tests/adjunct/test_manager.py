"""Adjunct data stores in running jobs, in-process: what tasks see, when, and after restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.adjunct.recovery import OFFSETS_FILE
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.storage.layout import StoreLayout
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.helpers import create_stream, end_version, job_config, seal

RATES = SystemStream("log", "rates")
IN = SystemStream("log", "in")


def adjunct_config(tmp_path: Path, task: str = "tests.adjunct.jobs:Enrich", **extra: Any) -> Settings:
    settings = {
        "stores__rates__adstore__input": "log.rates",
        "stores__rates__key__serde": "string",
        "stores__rates__msg__serde": "json",
        "systems__log__streams__rates__samza__bootstrap": "true",
    }
    settings.update(extra)
    return Settings.of(job_config(tmp_path, task, **settings))


def streams(config: Settings, partitions: int = 2) -> None:
    for name in ("in", "out", "rates"):
        create_stream(config, name, partitions)


def run(config: Settings, inputs: list[tuple[str, Any]], *, partition: int | None = None) -> JobResult:
    """Append ``inputs`` to the main input and run the job until that input ends."""
    write_stream(config, IN, inputs, partition=partition)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    return result


def run_again(config: Settings, inputs: list[tuple[str, Any]], partitions: int = 2) -> JobResult:
    """The same job on a fresh main input (a sealed one takes no more messages)."""
    stream = SystemStream("log", "in2")
    create_stream(config, stream.stream, partitions)
    config = config.with_overrides({"task.inputs": str(stream)})
    write_stream(config, stream, inputs)
    seal(config, stream.stream)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    return result


def enriched(config: Settings) -> dict[str, Any]:
    return {
        key: rate for pairs in read_stream(config, SystemStream("log", "out")).values() for _, (key, _, rate) in pairs
    }


def stored(result: JobResult) -> int:
    return sum(container.adjunct_stored for container in result.containers)


def test_bootstrap_fills_the_store_before_the_first_main_message_is_processed(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1)
    streams(config)
    write_stream(config, RATES, [(f"c{i}", i) for i in range(3000)])
    write_stream(config, RATES, [("c0", "last")])  # the newest offset at startup must be reached too
    result = run(config, [(f"c{i}", i) for i in range(0, 3000, 7)])
    seen = enriched(config)
    assert seen == {f"c{i}": ("last" if i == 0 else i) for i in range(0, 3000, 7)}
    assert stored(result) == 3001


def test_adjunct_messages_are_stored_and_never_given_to_process(tmp_path):
    config = adjunct_config(tmp_path)
    streams(config)
    write_stream(config, RATES, [("eur", 1.1), ("gbp", 1.3)])
    result = run(config, [("eur", 1), ("usd", 2)])
    assert sum(sum(c.processed.values()) for c in result.containers) == 2
    assert enriched(config) == {"eur": 1.1, "usd": None}


def test_a_null_value_deletes_the_key(tmp_path):
    config = adjunct_config(tmp_path)
    streams(config)
    write_stream(config, RATES, [("eur", 1.1), ("gbp", 1.3), ("eur", None)])
    run(config, [("eur", 1), ("gbp", 2)])
    assert enriched(config) == {"eur": None, "gbp": 1.3}


def test_an_extractor_projects_messages_and_skips_those_without_key(tmp_path):
    config = adjunct_config(
        tmp_path,
        stores__rates__adstore__key__value__extractor__factory="tests.adjunct.jobs:CurrencyOnlyFactory",
        task__broadcast__inputs="log.rates#[0-1]",  # the projected key is not what the stream is partitioned by
    )
    streams(config)
    records = [
        ("a", {"currency": "eur", "rate": 1.1, "source": "ecb"}),
        ("b", {"currency": "gbp", "rate": 1.3, "source": "boe"}),
        ("c", {"source": "no currency: skipped"}),
        ("d", {"currency": "gbp", "deleted": True}),
    ]
    write_stream(config, RATES, records, partition=0)  # one partition: the deletion comes last
    run(config, [("eur", 1), ("gbp", 2), ("a", 3)])
    assert enriched(config) == {"eur": 1.1, "gbp": None, "a": None}


def test_tasks_cannot_write_an_adjunct_store(tmp_path):
    config = adjunct_config(tmp_path, "tests.adjunct.jobs:TryToWrite")
    streams(config)
    run(config, [("eur", 1)])
    ((_, (_, outcome)),) = [
        pair for pairs in read_stream(config, SystemStream("log", "out")).values() for pair in pairs
    ]
    assert "read-only" in outcome and "rates" in outcome and "log.rates" in outcome


def test_a_partitioned_input_fills_one_store_per_task_with_its_partitions_only(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1)
    streams(config)
    write_stream(config, RATES, [("only-in-0", "p0")], partition=0)
    write_stream(config, RATES, [("only-in-1", "p1")], partition=1)
    write_stream(config, IN, [("only-in-0", 1), ("only-in-1", 2)], partition=0)
    run(config, [("only-in-0", 3), ("only-in-1", 4)], partition=1)
    by_partition = read_stream(config, SystemStream("log", "out"))
    seen = sorted(((key, rate) for pairs in by_partition.values() for _, (key, _, rate) in pairs), key=str)
    assert seen == sorted([("only-in-0", None), ("only-in-0", "p0"), ("only-in-1", None), ("only-in-1", "p1")], key=str)
    layout = StoreLayout.of(config)
    assert layout.store_dir("rates", "Partition 0", False).is_dir()
    assert layout.store_dir("rates", "Partition 1", False).is_dir()


def test_a_broadcast_input_fills_one_store_per_container_shared_by_its_tasks(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1, task__broadcast__inputs="log.rates#[0-1]")
    streams(config)
    write_stream(config, RATES, [("in-0", "p0")], partition=0)
    write_stream(config, RATES, [("in-1", "p1")], partition=1)
    write_stream(config, IN, [("in-0", 1), ("in-1", 2)], partition=0)
    result = run(config, [("in-0", 3), ("in-1", 4)], partition=1)
    by_partition = read_stream(config, SystemStream("log", "out"))
    seen = sorted((key, rate) for pairs in by_partition.values() for _, (key, _, rate) in pairs)
    assert seen == [("in-0", "p0"), ("in-0", "p0"), ("in-1", "p1"), ("in-1", "p1")]
    assert stored(result) == 2  # written once for the container, not once per task
    layout = StoreLayout.of(config)
    assert layout.store_dir("rates", "container-0", False).is_dir()
    assert not layout.store_dir("rates", "Partition 0", False).exists()


def test_an_undecodable_adjunct_message_fails_the_job_naming_stream_partition_and_offset(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1)
    streams(config)
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    producer.send("test", OutgoingMessageEnvelope(RATES, b"{not json", b"eur", partition=1))
    producer.flush("test")
    producer.stop()
    write_stream(config, IN, [("eur", 1)])
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    assert "offset 0 of stream 'log.rates' partition 1" in (result.error or "")


# --- the recovery table, case by case ------------------------------------------------------------


def assert_enriched(config: Settings, expected: dict[str, Any], *, bootstrap: bool) -> None:
    """What the second run's main messages saw. Only a bootstrap input is caught up before the first main
    message; a non-bootstrap one is read beside them, so its new record ("new") may arrive after "new" did."""
    seen = enriched(config)
    if not bootstrap and seen.get("new") is None:
        seen["new"] = expected["new"]
    assert seen == expected


def second_run(config: Settings, new_rates: list[tuple[str, Any]]) -> JobResult:
    write_stream(config, RATES, new_rates)
    return run_again(config, [("old", 1), ("new", 2)])


def first_run(config: Settings) -> None:
    streams(config)
    write_stream(config, RATES, [("old", "o")])
    run(config, [("old", 1)])


@pytest.mark.parametrize("bootstrap", ["true", "false"])
def test_a_valid_persistent_store_continues_from_its_own_offsets(tmp_path, bootstrap):
    config = adjunct_config(tmp_path, systems__log__streams__rates__samza__bootstrap=bootstrap)
    first_run(config)
    result = second_run(config, [("new", "n")])
    assert stored(result) == 1
    assert_enriched(config, {"old": "o", "new": "n"}, bootstrap=bootstrap == "true")


def test_an_expired_persistent_bootstrap_store_is_recreated_and_bootstrapped_from_the_oldest(tmp_path):
    config = adjunct_config(tmp_path, stores__rates__adstore__max__age__ms="0")
    first_run(config)
    result = second_run(config, [("new", "n")])
    assert stored(result) == 2
    assert enriched(config) == {"old": "o", "new": "n"}


def test_an_invalid_persistent_store_of_a_non_bootstrap_input_is_recreated_and_continues_from_the_last_offset(
    tmp_path,
):
    config = adjunct_config(tmp_path, systems__log__streams__rates__samza__bootstrap="false")
    first_run(config)
    for directory in StoreLayout.of(config).non_logged_base.glob("rates/*"):
        (directory / OFFSETS_FILE).write_bytes(b"torn")
    result = second_run(config, [("new", "n")])
    assert stored(result) == 1
    assert_enriched(config, {"old": None, "new": "n"}, bootstrap=False)


def test_a_missing_persistent_store_of_a_bootstrap_input_is_created_and_bootstrapped(tmp_path):
    config = adjunct_config(tmp_path)
    first_run(config)
    import shutil

    shutil.rmtree(StoreLayout.of(config).non_logged_base / "rates")
    result = second_run(config, [("new", "n")])
    assert stored(result) == 2
    assert enriched(config) == {"old": "o", "new": "n"}


def test_a_persistent_store_whose_offsets_were_trimmed_away_is_invalid_and_rebuilt(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1)
    streams(config, partitions=1)
    write_stream(config, RATES, [("old", "o"), ("gone", "g")])
    run(config, [("old", 1)])
    write_stream(config, RATES, [("new", "n"), ("newer", "nn")])
    admin = system_factory(config, "log").get_admin("log", config)
    assert isinstance(admin, LogSystemAdmin)
    admin.start()
    admin.trim(RATES.partition(0), "3")  # the store had read up to offset 1: offset 2 is lost
    admin.stop()
    result = run_again(config, [("old", 1), ("new", 2), ("newer", 3)], partitions=1)
    assert stored(result) == 1  # rebuilt from the oldest offset still there
    assert enriched(config) == {"old": None, "new": None, "newer": "nn"}


@pytest.mark.parametrize(("bootstrap", "expected_stored", "old"), [("true", 2, "o"), ("false", 1, None)])
def test_an_in_memory_store_bootstraps_from_the_oldest_or_continues_from_the_last_offset(
    tmp_path, bootstrap, expected_stored, old
):
    config = adjunct_config(
        tmp_path, stores__rates__factory="inmemory", systems__log__streams__rates__samza__bootstrap=bootstrap
    )
    first_run(config)
    result = second_run(config, [("new", "n")])
    assert stored(result) == expected_stored
    assert_enriched(config, {"old": old, "new": "n"}, bootstrap=bootstrap == "true")


# --- bounded datasets in versions ----------------------------------------------------------------


def test_a_versioned_store_serves_the_last_sealed_version_never_a_partial_one(tmp_path):
    config = adjunct_config(tmp_path, stores__rates__adstore__versioned="true")
    streams(config)
    write_stream(config, RATES, [("eur", "v1"), ("gbp", "v1")])
    end_version(config, RATES, "v1")
    write_stream(config, RATES, [("eur", "v2")])  # v2 is not complete: gbp missing
    run(config, [("eur", 1), ("gbp", 2)])
    assert enriched(config) == {"eur": "v1", "gbp": "v1"}

    write_stream(config, RATES, [("jpy", "v2")])
    end_version(config, RATES, "v2")
    run_again(config, [("eur", 1), ("gbp", 2), ("jpy", 3)])
    assert enriched(config) == {"eur": "v2", "gbp": None, "jpy": "v2"}


def test_a_high_level_application_joins_a_stream_with_an_adjunct_store(tmp_path):
    from tests.api.apps import app_config

    config = app_config(tmp_path, "tests.adjunct.jobs:EnrichApp")  # the table descriptor configures the store
    assert config["stores.rates.adstore.input"] == "log.rates"
    assert config["systems.log.streams.rates.samza.bootstrap"] == "true"
    streams(config)
    write_stream(config, RATES, [("eur", 1.1), ("gbp", 1.3)])
    write_stream(config, IN, [("eur", {"currency": "eur", "n": 1}), ("usd", {"currency": "usd", "n": 2})])
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    out = sorted(value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs)
    assert out == [["eur", 1, 1.1], ["usd", 2, None]]


def test_a_task_without_a_partition_of_a_partitioned_adjunct_input_is_told_how_to_fix_it(tmp_path):
    config = adjunct_config(tmp_path, job__container__count=1)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    create_stream(config, "rates", 1)
    write_stream(config, IN, [("eur", 1)])
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    assert "task 'Partition 1' reads no partition of 'log.rates'" in (result.error or "")
    assert "task.broadcast.inputs" in (result.error or "")


def test_after_bootstrap_updates_keep_flowing_into_the_store_while_tasks_read_it(tmp_path):
    import threading
    import time

    config = adjunct_config(tmp_path, task__commit__ms=100)
    streams(config)
    write_stream(config, RATES, [("eur", "first")])
    runner = InProcessRunner(config)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=60)), daemon=True)
    thread.start()
    try:
        for expected in ("first", "second", "third"):
            if expected != "first":
                write_stream(config, RATES, [("eur", expected)])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and enriched_or_empty(config).get("eur") != expected:
                write_stream(config, IN, [("eur", 0)])
                time.sleep(0.1)
            assert enriched_or_empty(config).get("eur") == expected
    finally:
        runner.request_stop()
        thread.join(60)
    assert outcome["result"].outcome == "stopped", outcome["result"].error


def enriched_or_empty(config: Settings) -> dict[str, Any]:
    return enriched(config) if read_stream(config, SystemStream("log", "out"), idle_timeout=0.1) else {}


def test_a_configured_manager_factory_replaces_the_built_in_manager(tmp_path):
    config = adjunct_config(tmp_path, stores__adstore__manager__factory="tests.adjunct.jobs:CountingManagerFactory")
    streams(config)
    write_stream(config, RATES, [("eur", 1.1), ("gbp", 1.3)])
    from tests.adjunct import jobs

    jobs.CountingManager.batches.clear()
    run(config, [("eur", 1)])
    assert sum(jobs.CountingManager.batches) == 2
    assert enriched(config) == {"eur": 1.1}


def test_job_status_shows_adjunct_positions_instead_of_task_lag_for_adjunct_partitions(tmp_path):
    from millstream.coordinator.status import job_status

    config = adjunct_config(tmp_path, stores__rates__adstore__versioned="true")
    streams(config)
    write_stream(config, RATES, [("eur", 1.1)], partition=0)
    end_version(config, RATES, "2026-11")
    run(config, [("eur", 1)])
    status = job_status(config)
    assert {row.ssp.stream for row in status.lag} == {"in"}
    rows = sorted((p.owner, p.ssp.partition, p.position, p.lag, p.version) for p in status.adjunct)
    # partition 0 holds a record and a marker (offsets 0, 1); partition 1 only its marker (offset 0)
    assert rows == [("Partition 0", 0, "1", 0, "2026-11"), ("Partition 1", 1, "0", 0, "2026-11")]


def test_a_table_descriptor_conflicting_with_the_config_is_refused_naming_the_key(tmp_path):
    from millstream.errors import ConfigError
    from tests.api.apps import app_config

    with pytest.raises(ConfigError, match=r"'stores.rates.msg.serde' is 'string', but table 'rates'"):
        app_config(tmp_path, "tests.adjunct.jobs:EnrichApp", stores__rates__msg__serde="string")


def test_startpoints_on_an_adjunct_input_are_refused_with_the_way_to_rebuild_instead(tmp_path):
    from millstream.contracts.startpoints import StartpointOldest
    from millstream.startpoint.tools import StartpointError, set_startpoints

    config = adjunct_config(tmp_path)
    streams(config)
    with pytest.raises(StartpointError, match=r"'log.rates' feeds an adjunct data store.*samza.reset.offset=true"):
        set_startpoints(config, "log.rates", StartpointOldest())
