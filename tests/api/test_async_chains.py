"""Async operators after other operators, in-process: ``filter → map → map_async → map``, a remote-table join
after a ``map``, and two awaits in a chain after a merge each produce exactly a synchronous graph's output
(in offset order per partition when ordered, the same multiset when not); the operators before an await run
once per message; a SIGKILL with hundreds of calls in flight behind such a prefix loses nothing; and what
cannot run before an await (a window, a hook) is refused naming the operator."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from millstream.api.application import InputDescriptor, StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.api.windows import Count, TumblingWindow
from millstream.config.settings import Settings
from millstream.coordinator.drain import request_drain
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.async_chain_apps import chain_result, kept
from tests.api.test_map_async import map_async_job, read, written
from tests.cli.test_main import millstream
from tests.helpers import create_stream, seal, wait_until
from tests.http_service import ServiceSettings, enrich_service
from tests.runtime.test_async_kill import job_file, killed_with_calls_in_flight
from tests.runtime.test_async_tasks import checkpointed

CHAIN = "tests.api.async_chain_apps:ChainEnriched"
JOINED = "tests.api.async_chain_apps:ChainJoined"
TWO_AWAITS = "tests.api.async_chain_apps:TwoAwaitsAfterAMerge"
REPARTITIONED = "tests.api.async_chain_apps:RepartitionedEnriched"
MISSING = frozenset(n for p in range(2) for n in range(1000 * p, 1000 * p + 150, 7))


def expected_chain(data: dict[int, list]) -> dict[int, list[dict[str, Any]]]:
    return {p: [chain_result(n) for n in ns if kept(n)] for p, ns in written(data).items()}


def in_partitions(results: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for result in results:
        found.setdefault(result["n"] // 1000, []).append(result)
    return found


def unordered(partitions: dict[int, list[dict[str, Any]]]) -> Counter[str]:
    return Counter(repr(sorted(result.items())) for results in partitions.values() for result in results)


@pytest.mark.parametrize("ordered", [True, False])
def test_filter_map_map_async_map_gives_a_synchronous_graphs_output_calling_once_per_kept_message(tmp_path, ordered):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path, service, app__class=CHAIN, test__ordered=str(ordered).lower())
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1, "calls were in flight together"
        called = Counter(service.counts.values)
    expected = expected_chain(data)
    out = in_partitions(read(config, "out"))
    if ordered:
        assert out == expected, "each kept message once, in offset order per partition"
    else:
        assert unordered(out) == unordered(expected)
    assert called == Counter(r["n"] for rs in expected.values() for r in rs), "one call per kept message"


@pytest.mark.parametrize("ordered", [True, False])
def test_a_remote_join_after_a_map_joins_every_message_once(tmp_path, ordered):
    with enrich_service(ServiceSettings(latency=(0.0, 0.01), flaky=1, missing=MISSING)) as service:
        config, data = map_async_job(tmp_path, service, app__class=JOINED, test__ordered=str(ordered).lower())
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    expected = {
        p: [{"n": m["n"], "user": m["user"], "e": m["n"] * 10} for _, m in pairs if m["n"] not in MISSING]
        for p, pairs in data.items()
    }
    out = in_partitions(read(config, "out"))
    if ordered:
        assert out == expected, "each joined once, in offset order per partition"
    else:
        assert unordered(out) == unordered(expected)


def test_two_awaits_in_a_chain_after_a_merge_keep_a_synchronous_graphs_order_beside_a_branch_outside(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path, service, app__class=TWO_AWAITS)
        create_stream(config, "side", 1)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        called = Counter(service.counts.values)
    ns = written(data)
    expected = {
        p: [{"n": n, "e": n * 10, "odd": n % 2 == 1, "e2": n * 10, "copy": copy} for n in partition for copy in (0, 1)]
        for p, partition in ns.items()
    }
    assert in_partitions(read(config, "out")) == expected, "twice each, in offset order per partition"
    side = {p: [m["n"] for m in ms] for p, ms in in_partitions(read(config, "side")).items()}
    assert side == {p: [n for n in partition if n % 2 == 1] for p, partition in ns.items()}
    assert called == Counter(n for partition in ns.values() for n in partition for _ in (0, 1)), "two calls each"


def test_an_await_after_a_partition_by_and_a_map_enriches_every_message_once_keeping_each_users_order(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path, service, app__class=REPARTITIONED)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        called = Counter(service.counts.values)
    out = read(config, "out")
    messages = [m for pairs in data.values() for _, m in pairs]
    assert Counter(m["n"] for m in out) == Counter(m["n"] for m in messages) == called, "each once, one call each"
    assert all(m["e"] == m["n"] * 10 for m in out)
    for user in {m["user"] for m in messages}:  # one user's messages of one source partition keep their order
        for partition in data:
            ns = [m["n"] for m in out if m["user"] == user and m["n"] // 1000 == partition]
            assert ns == sorted(ns)


def test_a_drain_with_calls_in_flight_behind_a_prefix_waits_for_them_and_the_next_run_goes_on_exactly(tmp_path):
    from tests.api.test_drain import checkpointed as source_offsets
    from tests.api.test_drain import run_in_background

    with enrich_service(ServiceSettings(latency=(0.2, 0.4))) as service:
        config, data = map_async_job(
            tmp_path, service, app__class=CHAIN, job__drain__poll__interval__ms=100, sealed=False
        )
        _, thread, results = run_in_background(config)
        wait_until(lambda: service.counts.in_flight >= 20, 60, "calls in flight")
        request_drain(config)
        thread.join(timeout=90)
        assert not thread.is_alive(), "the drained job did not end"
        assert results["result"].outcome == "drained", results["result"].error
        drained = in_partitions(read(config, "out"))
        offsets = {int(key.rsplit(".", 1)[-1]): offset for key, offset in source_offsets(config).items()}
        assert sum(offsets.values()) < 2 * (len(data[0]) - 1), "drained before the end"
        assert drained == {
            p: [r for r in rs if r["n"] % 1000 <= offsets.get(p, -1)] for p, rs in expected_chain(data).items()
        }, "what was in flight at the drain came out, up to the checkpoint, and nothing past it"

        seal(config, "in")
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    assert in_partitions(read(config, "out")) == expected_chain(data), "the rest once, in order"


def test_a_failed_call_behind_a_prefix_fails_the_job_naming_the_task_partition_offset_and_call(tmp_path):
    with enrich_service(ServiceSettings(failing=frozenset({1004}))) as service:
        config, _ = map_async_job(tmp_path, service, app__class=CHAIN)
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    error = result.error or ""
    assert "task 'Partition 1' failed processing offset 4 of stream 'log.in' partition 1" in error, error
    assert "AsyncCallError: map_async 'map_async-0' failed: RuntimeError: GET http://127.0.0.1:" in error, error
    assert "/enrich?v=1004 answered 500" in error, error


def test_under_skip_a_failed_call_behind_a_prefix_skips_only_its_message(tmp_path):
    with enrich_service(ServiceSettings(failing=frozenset({1004, 7}))) as service:
        config, data = map_async_job(tmp_path, service, app__class=CHAIN, task__process__errors="skip")
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    expected = {p: [r for r in results if r["n"] not in (1004, 7)] for p, results in expected_chain(data).items()}
    assert in_partitions(read(config, "out")) == expected


def test_an_async_operator_after_a_window_a_stateful_map_or_a_hook_is_refused_naming_the_operator():
    app = StreamApplicationDescriptor(Settings({}))
    stream = app.input(InputDescriptor("log.in"))

    async def enrich(message: Any) -> Any:
        return message

    class Hooked:
        def __call__(self, message: Any) -> Any:
            return message

        def on_watermark(self, watermark: int) -> list[Any]:
            return []

    windowed = stream.window(TumblingWindow(1000), aggregate=Count(), name="per-second")
    with pytest.raises(ApplicationError, match="map_async 'map_async': cannot follow window 'per-second'"):
        windowed.map(lambda pane: pane).map_async(enrich)
    counted = stream.map_with_state(lambda m, s: m, key=lambda m: m, name="running")
    with pytest.raises(ApplicationError, match="cannot follow map_with_state 'running'"):
        counted.filter(lambda m: True).flat_map_async(enrich)
    with pytest.raises(ApplicationError, match="cannot follow map 'hooked', whose function has on_watermark"):
        stream.map(Hooked(), name="hooked").map_async(enrich)
    stream.map(lambda m: m).filter(bool).map_async(enrich).map(lambda m: m).map_async(enrich)  # allowed


PARTITIONS, PER_PARTITION, SPAN = 2, 6000, 10_000


def out_counts(config: Settings) -> dict[int, Counter[int]]:
    counts: dict[int, Counter[int]] = {p: Counter() for p in range(PARTITIONS)}
    for pairs in read_stream(config, SystemStream("log", "out")).values():
        for _, value in pairs:
            assert value == chain_result(value["n"])
            counts[value["n"] // SPAN][value["n"] % SPAN] += 1
    return counts


def test_a_sigkill_with_hundreds_in_flight_behind_a_filter_and_a_map_loses_nothing(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.2, 0.5))) as service:
        path = job_file(tmp_path, service.url, {"job.name": "async-chain-kill", "app.class": CHAIN})
        config = load_job_config(path)
        create_stream(config, "in", PARTITIONS)
        create_stream(config, "out", 1)
        for partition in range(PARTITIONS):
            values = [(f"k{i % 50}", {"user": "u", "n": SPAN * partition + i, "ts": i}) for i in range(PER_PARTITION)]
            write_stream(config, SystemStream("log", "in"), values, partition=partition)
        seal(config, "in")

        committed, in_flight_at_kill = killed_with_calls_in_flight(path, tmp_path, config, service)
        before = out_counts(config)
        assert in_flight_at_kill >= 300, "hundreds of calls were in flight when the job was killed"
        for partition, offset in committed.items():
            missing = [i for i in range(offset + 1) if kept(SPAN * partition + i) and before[partition][i] == 0]
            assert missing == [], f"partition {partition} checkpointed {offset} before the output of {missing[:5]}"
        assert sum(sum(c.values()) for c in before.values()) < PARTITIONS * PER_PARTITION * 2 // 3, "killed too late"

        service.settings.latency = 0.0
        rerun = millstream("run", "--in-process", path, timeout=180)
        assert rerun.returncode == 0, rerun.stderr
    after = out_counts(config)
    for partition in range(PARTITIONS):
        kept_here = [i for i in range(PER_PARTITION) if kept(SPAN * partition + i)]
        assert set(after[partition]) == set(kept_here), "nothing lost, nothing extra"
        last = committed.get(partition, -1)
        assert all(after[partition][i] == 1 for i in kept_here if i <= last), "nothing up to the checkpoint twice"
    assert checkpointed(config) == {p: str(PER_PARTITION - 1) for p in range(PARTITIONS)}
