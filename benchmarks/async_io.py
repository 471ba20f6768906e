"""Calling a service per message: a synchronous task against an ``AsyncStreamTask`` at several concurrencies.

    python -m benchmarks.async_io [--latency-ms 10] [--seconds 3] [--concurrency 1,10,100,1000]

The service is ``tests/http_service.py``'s loopback HTTP server, in a process of its own (so its work is not
the job's), answering after ``--latency-ms``. Every job is one container, one task, one partition of the
embedded log, the task enriching each message with one GET:

- *sync*: a ``StreamTask`` whose ``process()`` calls the service with ``http.client`` on a kept-alive
  connection, one message at a time: what a task could do before ``AsyncStreamTask``;
- *async N*: an ``AsyncStreamTask`` calling it, ``task.max.concurrency=N``, with an aiohttp session
  (*aiohttp*) or with a minimal HTTP/1.1 client on asyncio streams (*streams*, as little HTTP as
  ``http.client`` does, so the comparison is of the task paths rather than of the HTTP libraries).

Part one prints the throughput of each against the sync rate (issue 32's target: 50x at concurrency 100).
Part two runs both again with a service that answers at once and prints the CPU time of the job's process
per message (``time.process_time``: the framework, the HTTP client and the event loop, not the service):
the cost of the async path against ``process()`` (target: within 1.5x).

Part three reads the service through a remote table (``RemoteTable``, ``context.get_table``) at concurrency
100, the key of a message being its offset modulo ``--table-keys``: plain; with a cache (``cache.ttl.ms``:
each key read once, the rest hits); with batched reads (``read_all``, distinct keys). It prints each
one's throughput against the plain table and against the same GET written by hand in ``process_async``
(*async aiohttp* above), and the service calls per message.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.log_jobs import log_job_config, reset_output
from benchmarks.log_raw_read import write_messages
from millstream import (
    AsyncStreamTask,
    ClosableTask,
    InitableTask,
    OutgoingMessageEnvelope,
    RemoteTable,
    StreamTask,
    SystemStream,
    TaskContext,
)
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.embedded.log.factory import LogSystemFactory
from millstream.testing import InProcessRunner

OUT = SystemStream("log", "bench-out")


class SyncEnrich(StreamTask, InitableTask):
    """One blocking GET per message on a kept-alive connection."""

    def init(self, context: TaskContext) -> None:
        url = urlsplit(str(context.config.get("bench.service.url")))
        self.connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port)

    def process(self, envelope, collector, coordinator):
        self.connection.request("GET", f"/enrich?v={envelope.offset}")
        response = self.connection.getresponse()
        body = json.loads(response.read())
        collector.send(OutgoingMessageEnvelope(OUT, str(body["e"]).encode()))


class AsyncEnrich(AsyncStreamTask, InitableTask, ClosableTask):
    """The same GET with aiohttp, ``task.max.concurrency`` at a time."""

    async def init(self, context: TaskContext) -> None:  # type: ignore[override]
        import aiohttp

        self.url = f"{context.config.get('bench.service.url')}/enrich"
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def process_async(self, envelope, collector, coordinator):
        async with self.session.get(self.url, params={"v": envelope.offset}) as response:
            body = await response.json()
        collector.send(OutgoingMessageEnvelope(OUT, str(body["e"]).encode()))

    async def close(self) -> None:  # type: ignore[override]
        await self.session.close()


class StreamsEnrich(AsyncStreamTask, InitableTask):
    """The same GET over asyncio streams, kept-alive connections reused: as little HTTP as ``http.client``
    does, so the comparison with ``SyncEnrich`` is of the task paths, not of the HTTP libraries."""

    def init(self, context: TaskContext) -> None:
        url = urlsplit(str(context.config.get("bench.service.url")))
        self.address = (url.hostname or "127.0.0.1", url.port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def process_async(self, envelope, collector, coordinator):
        reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection(*self.address)
        writer.write(f"GET /enrich?v={envelope.offset} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = json.loads(await reader.readexactly(length))
        self.idle.append((reader, writer))
        collector.send(OutgoingMessageEnvelope(OUT, str(body["e"]).encode()))


CALLS = {"read": 0, "read_all": 0}
"""Calls the benchmark's remote table made (the job runs in this process)."""


def bench_table(config: Config) -> RemoteTable:
    """Table ``bench`` over the service: ``GET /enrich`` per key, ``GET /enrich_batch`` per batch."""
    import aiohttp

    url = str(config.get("bench.service.url"))
    session: list[aiohttp.ClientSession] = []

    async def open_session() -> None:
        session.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))

    async def read(key: int) -> Any:
        CALLS["read"] += 1
        async with session[0].get(f"{url}/enrich", params={"v": key}) as response:
            return await response.json()

    async def read_all(keys: list[int]) -> dict[int, Any]:
        CALLS["read_all"] += 1
        async with session[0].get(f"{url}/enrich_batch", params={"v": ",".join(map(str, keys))}) as response:
            return {int(key): value for key, value in (await response.json()).items()}

    async def close_session() -> None:
        await session[0].close()

    batched = config.get("bench.batched", "false") == "true"
    return RemoteTable("bench", read, read_all=read_all if batched else None, open=open_session, close=close_session)


class TableEnrich(AsyncStreamTask, InitableTask):
    """The same enrichment through the remote table ``bench``, key = offset modulo ``bench.keys``."""

    def init(self, context: TaskContext) -> None:
        self.table = context.get_table("bench")
        self.keys = int(context.config.get("bench.keys", "1000000000"))

    async def process_async(self, envelope, collector, coordinator):
        record = await self.table.get(int(envelope.offset) % self.keys)
        collector.send(OutgoingMessageEnvelope(OUT, str(record["e"]).encode()))


def _serve(latency: float, connection: Connection) -> None:
    from tests.http_service import EnrichService, ServiceSettings

    service = EnrichService(ServiceSettings(latency=latency)).start()
    connection.send(service.url)
    connection.recv()  # until told to stop
    service.stop()


class Service:
    """The loopback service in a process of its own."""

    def __init__(self, latency: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(latency, child), daemon=True)
        self.process.start()
        self.url: str = self.connection.recv()

    def stop(self) -> None:
        self.connection.send("stop")
        self.process.join(timeout=30)


def run(root: Path, name: str, task: str, stream: str, url: str, extra: dict[str, Any]) -> tuple[float, float, int]:
    """(messages/s from first to last message, CPU seconds of this process, messages) of one job."""
    reset_output(root, 1)
    config = log_job_config(root, name, task, extra={"task.inputs": f"log.{stream}", "bench.service.url": url, **extra})
    cpu = time.process_time()
    result = InProcessRunner(config).run()
    cpu = time.process_time() - cpu
    assert result.outcome == "finished", result.error
    (container,) = result.containers
    return container.messages / container.processing_seconds, cpu, container.messages


def stream_of(root: Path, messages: int, made: dict[int, str]) -> str:
    if messages not in made:
        name = made[messages] = f"bench-{messages}"
        write_messages(root / "log", name, 1, messages, 8)
        LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(root / "log")})).seal_stream(name)
    return made[messages]


def throughput(root: Path, args: argparse.Namespace, made: dict[int, str]) -> None:
    service = Service(args.latency_ms / 1000)
    try:
        per_call = args.latency_ms / 1000
        sync_messages = max(50, int(args.seconds / per_call))
        sync_rate, _, _ = run(
            root, "sync", "benchmarks.async_io:SyncEnrich", stream_of(root, sync_messages, made), service.url, {}
        )
        print(f"service latency {args.latency_ms} ms; sync process(): {sync_rate:,.0f} msgs/s")
        for concurrency in args.concurrency:
            messages = max(50, int(args.seconds * min(concurrency / per_call, args.ceiling)))
            stream = stream_of(root, messages, made)
            for client, task in (("aiohttp", "AsyncEnrich"), ("streams", "StreamsEnrich")):
                rate, _, _ = run(
                    root, f"{client}-{concurrency}", f"benchmarks.async_io:{task}",
                    stream, service.url, {"task.max.concurrency": concurrency},
                )  # fmt: skip
                print(
                    f"async ({client}), task.max.concurrency={concurrency:>5}: "
                    f"{rate:>9,.0f} msgs/s = {rate / sync_rate:6.1f}x sync"
                )
    finally:
        service.stop()


def cpu_per_message(root: Path, args: argparse.Namespace, made: dict[int, str]) -> None:
    service = Service(0.0)
    try:
        stream = stream_of(root, args.cpu_messages, made)
        runs: list[tuple[str, str, dict[str, Any]]] = [("sync process()", "benchmarks.async_io:SyncEnrich", {})]
        for c in (1, 100):
            runs.append((f"aiohttp, concurrency {c}", "benchmarks.async_io:AsyncEnrich", {"task.max.concurrency": c}))
            runs.append((f"streams, concurrency {c}", "benchmarks.async_io:StreamsEnrich", {"task.max.concurrency": c}))
        costs: dict[str, float] = {}
        for round_ in range(args.rounds):
            for index, (label, task, extra) in enumerate(runs):
                _, cpu, messages = run(root, f"cpu-{round_}-{index}", task, stream, service.url, extra)
                costs[label] = min(costs.get(label, float("inf")), cpu / messages)
        sync = costs["sync process()"]
        print(f"service answering at once, {args.cpu_messages:,} messages, best of {args.rounds}:")
        for label, cost in costs.items():
            print(f"  {label:<26} {cost * 1e6:7.0f} us CPU/message = {cost / sync:4.2f}x process()")
    finally:
        service.stop()


def remote_table(root: Path, args: argparse.Namespace, made: dict[int, str]) -> None:
    service = Service(args.latency_ms / 1000)
    try:
        messages = max(500, int(args.seconds * 100 / (args.latency_ms / 1000)))
        stream = stream_of(root, min(messages, int(args.seconds * args.ceiling)), made)
        table = {"task.max.concurrency": 100, "tables.bench.definition": "benchmarks.async_io:bench_table"}
        runs: list[tuple[str, dict[str, Any]]] = [
            ("plain", {}),
            (f"cache, {args.table_keys} keys", {"tables.bench.cache.ttl.ms": 600_000, "bench.keys": args.table_keys}),
            ("batched reads", {"bench.batched": "true"}),
        ]
        print(f"remote table, service latency {args.latency_ms} ms, task.max.concurrency=100:")
        import benchmarks.async_io as job_module  # the job's module, also when this one runs as __main__

        calls_made = job_module.CALLS
        by_hand, _, _ = run(root, "table-by-hand", "benchmarks.async_io:AsyncEnrich", stream, service.url,
                            {"task.max.concurrency": 100})  # fmt: skip
        print(f"  {'aiohttp GET by hand':<22} {by_hand:>9,.0f} msgs/s")

        plain = 0.0
        for index, (label, extra) in enumerate(runs):
            calls_made.update(read=0, read_all=0)
            rate, _, count = run(root, f"table-{index}", "benchmarks.async_io:TableEnrich", stream, service.url,
                                 {**table, **extra})  # fmt: skip
            plain = plain or rate
            calls = (calls_made["read"] + calls_made["read_all"]) / count
            print(
                f"  {label:<22} {rate:>9,.0f} msgs/s = {rate / plain:5.2f}x plain = {rate / by_hand:5.2f}x by hand; "
                f"{calls:5.3f} calls/message"
            )
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="about how long each throughput run lasts")
    parser.add_argument("--ceiling", type=float, default=5000.0, help="msgs/s assumed at most, to size the runs")
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 10, 100, 1000])
    parser.add_argument("--cpu-messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--table-keys", type=int, default=100, help="distinct keys of the cached table run")
    parser.add_argument("--parts", default="throughput,cpu,table", help="which parts to run")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    made: dict[int, str] = {}
    try:
        parts = args.parts.split(",")
        if "throughput" in parts:
            throughput(root, args, made)
        if "cpu" in parts:
            cpu_per_message(root, args, made)
        if "table" in parts:
            remote_table(root, args, made)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
