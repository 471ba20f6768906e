"""``map_async`` / ``flat_map_async`` in-process: each message enriched from the loopback HTTP service once,
results downstream in offset order per partition with calls in flight together (a window downstream counts
every message once), unordered and flat variants, and what the API refuses."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from millstream.api.application import InputDescriptor, StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.helpers import create_stream, seal
from tests.http_service import EnrichService, ServiceSettings, enrich_service

APP = "tests.api.apps:AsyncEnriched"
PARTITIONS, PER_PARTITION = 2, 150


def map_async_job(
    tmp_path: Path, service: EnrichService, *, sealed: bool = True, **extra: Any
) -> tuple[Settings, dict[int, list]]:
    config = app_config(tmp_path, APP, test__service__url=service.url, **extra)
    data = {p: messages(p, PER_PARTITION) for p in range(PARTITIONS)}
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 1)
    create_stream(config, "counts", 1)
    for partition, pairs in data.items():
        write_stream(config, SystemStream("log", "in"), pairs, partition=partition)
    if sealed:
        seal(config, "in")
    return config, data


def read(config: Settings, stream: str) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", stream)).values() for _, value in pairs]


def by_partition(results: list[dict[str, Any]]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = defaultdict(list)
    for result in results:
        found[result["n"] // 1000].append(result["n"])
    return dict(found)


def written(data: dict[int, list]) -> dict[int, list[int]]:
    return {p: [m["n"] for _, m in pairs] for p, pairs in data.items()}


def test_map_async_enriches_every_message_once_in_offset_order_and_a_window_downstream_counts_each_once(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path, service)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1, "calls were in flight together"
    out = read(config, "out")
    assert by_partition(out) == written(data), "each once, in offset order per partition"
    assert all(m["e"] == m["n"] * 10 for m in out)
    counts: Counter[tuple[str, int]] = Counter()
    for pane in read(config, "counts"):  # each task counts its own partition: panes of a window add up
        counts[(pane["user"], pane["start"])] += pane["count"]
    assert dict(counts) == reference_counts(data)


def test_unordered_map_async_and_flat_map_async_emit_every_result_the_right_number_of_times(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path / "unordered", service, test__ordered="false")
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert Counter(m["n"] for m in read(config, "out")) == Counter(n for ns in written(data).values() for n in ns)

        config, data = map_async_job(tmp_path / "flat", service, test__flat="true")
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    out = by_partition(read(config, "out"))
    assert out == {p: [n for n in ns for _ in (0, 1)] for p, ns in written(data).items()}, "twice each, in order"


def test_a_map_async_call_past_its_timeout_fails_the_job_naming_the_operator_and_the_message(tmp_path):
    with enrich_service(ServiceSettings(hanging=frozenset({1003}))) as service:
        config, _ = map_async_job(tmp_path, service, test__timeout__ms="300")
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    assert "failed processing offset 3 of stream 'log.in' partition 1: OperatorTimeoutError: map_async " in (
        result.error or ""
    ), result.error
    assert "did not complete within timeout_ms=300" in (result.error or "")


def test_map_async_refuses_a_sync_function_and_a_concurrency_below_one():
    app = StreamApplicationDescriptor(Settings({}))
    stream = app.input(InputDescriptor("log.in"))

    async def enrich(message: Any) -> Any:
        return message

    with pytest.raises(ApplicationError, match="fn must be an async function"):
        stream.map_async(lambda m: m)
    with pytest.raises(ApplicationError, match="concurrency must be >= 1"):
        stream.map_async(enrich, concurrency=0)
