"""A remote table against the real loopback HTTP service: the cache, batching, reads in flight shared,
retries of transient failures within the attempts and the budget, errors naming table and key, and the
rate limiter keeping the service under its limit. Failures are the service's own (503, 500, 429)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from millstream import RemoteTable, RemoteTableError
from millstream.config.settings import Settings
from millstream.contracts.metrics import Registry
from millstream.table.provider import TableProvider
from millstream.table.remote import RemoteTableInstance
from millstream.table.settings import TableConfig
from tests.http_service import EnrichService, ServiceSettings, enrich_service
from tests.table.enrich_table import enrich_table


def run(definition: RemoteTable, use: Callable[[RemoteTableInstance], Awaitable[Any]]) -> tuple[Any, Registry]:
    registry = Registry({})
    instance = RemoteTableInstance(definition, Settings(definition.settings).view(TableConfig, "enrich"), registry)

    async def body() -> Any:
        try:
            return await use(instance)
        finally:
            await instance.close()

    return asyncio.run(body()), registry


def counted(registry: Registry, name: str) -> float:
    return sum(sample.value for sample in registry.snapshot() if sample.name == name)


def expected(keys: range) -> dict[int, dict[str, int]]:
    return {key: {"v": key, "e": key * 10} for key in keys}


async def read_all(instance: RemoteTableInstance, keys: range) -> dict[int, Any]:
    values = await asyncio.gather(*(instance.get(key) for key in keys))
    return dict(zip(keys, values, strict=True))


def test_a_cached_record_is_read_from_the_service_once_and_a_second_read_is_a_hit():
    with enrich_service() as service:

        async def twice(instance: RemoteTableInstance) -> tuple[dict[int, Any], dict[int, Any]]:
            return await read_all(instance, range(20)), await read_all(instance, range(20))

        (first, second), registry = run(enrich_table(service.url, cache_ttl_ms=60_000), twice)
    assert first == second == expected(range(20))
    assert service.counts.requests == {key: 1 for key in range(20)}
    assert (counted(registry, "table_cache_hits"), counted(registry, "table_cache_misses")) == (20, 20)


def test_reads_asked_together_go_out_in_batches_of_at_most_the_batch_size_and_a_key_asked_twice_once():
    with enrich_service(ServiceSettings(latency=0.01)) as service:

        async def together(instance: RemoteTableInstance) -> dict[int, Any]:
            doubled = await asyncio.gather(*(instance.get(key % 50) for key in range(100)))
            return dict(zip(range(50), doubled[:50], strict=True))

        found, registry = run(enrich_table(service.url, batched=True, batch_max_size=16), together)
    assert found == expected(range(50))
    assert sum(service.counts.batches) == 50, "each key fetched once"
    assert max(service.counts.batches) == 16 and len(service.counts.batches) == 4
    assert counted(registry, "table_batches") == 4


def test_transient_failures_are_retried_and_a_call_that_keeps_failing_names_the_table_key_and_attempts():
    with enrich_service(ServiceSettings(flaky=2)) as service:
        found, registry = run(enrich_table(service.url, backoff_ms=5), lambda table: read_all(table, range(5)))
        assert found == expected(range(5))
        assert counted(registry, "table_retries") == 10 and counted(registry, "table_requests") == 15

        with pytest.raises(RemoteTableError) as failure:
            run(enrich_table(service.url, backoff_ms=5, max_attempts=2), lambda table: table.get(7))
    assert str(failure.value).startswith(
        "remote table 'enrich': read of key 7 failed after 2 attempts (max attempts 2 reached): RetriableError: "
        "GET /enrich?v=7 answered 503"
    )
    assert (failure.value.table_id, failure.value.key, failure.value.attempts) == ("enrich", 7, 2)


def test_a_failure_that_is_not_retriable_fails_at_once_and_retries_stop_at_the_budget():
    with enrich_service(ServiceSettings(failing=frozenset({3}), flaky=1000)) as service:
        with pytest.raises(RemoteTableError, match=r"read of key 3 failed after 1 attempt \(not retriable\)"):
            service.settings.flaky = 0
            run(enrich_table(service.url), lambda table: table.get(3))
        service.settings.flaky = 1000
        with pytest.raises(RemoteTableError, match=r"read of key 4 .*\(retry budget of 200 ms used up\)"):
            run(
                enrich_table(service.url, max_attempts=1000, backoff_ms=20, backoff_max_ms=20, retry_budget_ms=200),
                lambda table: table.get(4),
            )
    assert 5 <= service.counts.requests[4] <= 12, "about budget / backoff attempts"


def test_the_rate_limiter_keeps_calls_under_the_service_limit_that_an_unlimited_table_exceeds():
    with enrich_service(ServiceSettings(rate_limit=40)) as service:
        _, registry = run(
            enrich_table(service.url, rate_limit=25, rate_limit_burst=5, max_attempts=1),
            lambda table: read_all(table, range(60)),
        )
        assert service.counts.throttled == 0 and service.counts.served == 60
        assert counted(registry, "table_throttled_seconds") > 0
        unlimited = ServiceSettings(rate_limit=40)
        service.settings = unlimited
        with pytest.raises(RemoteTableError, match="429"):
            run(enrich_table(service.url, max_attempts=1), lambda table: read_all(table, range(100, 160)))
    assert service.counts.throttled > 0


def test_a_table_reached_by_id_is_built_from_its_config_definition_and_overrides_its_settings(tmp_path):
    service = EnrichService()
    config = Settings(
        {
            "tables.enrich.definition": "tests.table.enrich_table:from_config",
            "tables.enrich.cache.ttl.ms": "1000",
            "test.service.url": service.url,
        }
    )
    provider = TableProvider(config)
    instance = provider.get("enrich")
    assert provider.get("enrich") is instance, "one instance per container"
    assert instance.cache is not None and instance.cache.ttl == 1.0
    with pytest.raises(
        Exception, match=r"remote table 'other' is not defined: set config key 'tables\.other\.definition'"
    ):
        provider.get("other")


class FakeTime:
    """An injected clock whose sleeps advance it, so waits are asserted exactly."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_calls_past_the_rate_wait_their_turn_on_the_injected_clock_and_the_wait_is_counted():
    time, registry = FakeTime(), Registry({})

    async def read(key: int) -> int:
        return key

    definition = RemoteTable("t", read, rate_limit=5, rate_limit_burst=1)
    settings = Settings(definition.settings).view(TableConfig, "t")
    instance = RemoteTableInstance(definition, settings, registry, time.clock, time.sleep)

    async def one_by_one() -> list[Any]:
        return [await instance.get(key) for key in range(4)]

    assert asyncio.run(one_by_one()) == [0, 1, 2, 3]
    assert time.slept == [0.2, 0.2, 0.2], "the first call uses the burst, each next one waits 1/rate"
    assert counted(registry, "table_throttled_seconds") == pytest.approx(0.6)


def test_put_writes_through_to_the_cache_delete_invalidates_it_and_a_table_without_write_refuses_naming_it():
    stored: dict[str, str] = {}
    reads: list[str] = []

    async def read(key: str) -> str | None:
        reads.append(key)
        return stored.get(key)

    async def write(key: str, value: str) -> None:
        stored[key] = value

    async def delete(key: str) -> None:
        stored.pop(key, None)

    async def scenario(instance: RemoteTableInstance) -> list[Any]:
        await instance.put("a", "1")
        first = await instance.get("a")  # from the cache: no read
        await instance.delete("a")
        second = await instance.get("a")  # read: gone
        return [first, second]

    definition = RemoteTable("t", read, write=write, delete=delete, cache_ttl_ms=60_000)
    registry = Registry({})
    instance = RemoteTableInstance(definition, Settings(definition.settings).view(TableConfig, "t"), registry)
    assert asyncio.run(scenario(instance)) == ["1", None]
    assert reads == ["a"]
    read_only = RemoteTable("ro", read)
    with pytest.raises(Exception, match="remote table 'ro' has no write function: cannot put key 'k'"):
        run(read_only, lambda table: table.put("k", "v"))


def test_puts_together_go_out_as_one_write_all_a_delete_waits_for_its_keys_batch_and_a_failure_reaches_every_put():
    calls: list[Any] = []
    fail = {"now": False}

    async def read(key: str) -> str | None:
        return None

    async def write_all(records: dict[str, int]) -> None:
        calls.append(("write_all", dict(records)))
        if fail["now"]:
            raise ValueError("store refused")

    async def delete(key: str) -> None:
        calls.append(("delete", key))

    async def scenario(instance: RemoteTableInstance) -> None:
        await asyncio.gather(*(instance.put(f"k{i}", i) for i in range(5)), instance.put("k0", 99))
        assert instance.cache is not None and instance.cache.get("k3", 0.0) == 3, "written through to the cache"
        pending = asyncio.ensure_future(instance.put("x", 1))
        await asyncio.sleep(0)  # the put waits in its batch (linger)
        await instance.delete("x")
        await pending
        fail["now"] = True
        results = await asyncio.gather(instance.put("a", 1), instance.put("b", 2), return_exceptions=True)
        assert [type(result).__name__ for result in results] == ["RemoteTableError", "RemoteTableError"]
        assert "write_all of keys ['a', 'b'] failed after 1 attempt (not retriable): ValueError: store refused" in str(
            results[0]
        )

    definition = RemoteTable(
        "t", read, write_all=write_all, delete=delete, cache_ttl_ms=60_000, batch_linger_ms=50, max_attempts=1
    )
    instance = RemoteTableInstance(definition, Settings(definition.settings).view(TableConfig, "t"))
    asyncio.run(scenario(instance))
    assert calls[0] == ("write_all", {"k0": 99, "k1": 1, "k2": 2, "k3": 3, "k4": 4}), "one call, the last value of k0"
    assert calls[1:3] == [("write_all", {"x": 1}), ("delete", "x")], "the delete after the put of its key"


def test_an_open_that_failed_fails_its_calls_and_runs_again_at_the_next_call():
    opened: list[int] = []

    async def open_client() -> None:
        opened.append(1)
        await asyncio.sleep(0)  # yields: the second call comes while the first open runs, and waits for it
        if len(opened) == 1:
            raise ConnectionRefusedError("service not up yet")

    async def read(key: int) -> int:
        return key

    async def twice(instance: RemoteTableInstance) -> Any:
        first = await asyncio.gather(instance.get(1), instance.get(2), return_exceptions=True)
        return first, await instance.get(3)

    (first, third), _ = run(RemoteTable("t", read, open=open_client), twice)
    assert [type(result).__name__ for result in first] == ["ConnectionRefusedError"] * 2
    assert third == 3 and len(opened) == 2
