"""Applications the high-level API tests run, importable by Spark workers as ``tests.api.apps:<Name>``.

Messages are ``{"user": "u3", "n": 17, "ts": 17000}`` on ``log.in`` (string keys, JSON values).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from millstream.api.application import InputDescriptor, OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.task import TaskContext
from millstream.api.windows import Count, SessionWindow, TumblingWindow, WindowPane
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.control.messages import MAX_WATERMARK
from millstream.coordinator.prepare import prepare

WINDOW_MS = 10_000


def source(app: StreamApplicationDescriptor) -> Any:
    return app.input(InputDescriptor("log.in", key_serde="string", msg_serde="json", timestamp=lambda m: m["ts"]))


class RepartitionPassThrough(StreamApplication):
    """``in`` → partition_by(user) → ``out``: every message through one intermediate stream."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class TwoHops(StreamApplication):
    """Two repartitionings in a row: by user, then by ``n % 3``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .partition_by(lambda m: m["n"] % 3, name="by-residue")
            .map(lambda kv: kv.value)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class WindowedCount(StreamApplication):
    """Counts per user per 10 s of event time across a repartitioning by user. The output interleaves
    panes with the watermarks the window passed on (``{"task", "watermark"}``), so a test can check each
    pane came out exactly when the watermark reached its end. ``test.output`` names another output stream."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .partition_by(lambda m: m["user"], name="by-user")
            .window(TumblingWindow(WINDOW_MS), key=lambda kv: kv.key, aggregate=Count(), name="per-10s")
            .map(PanesAndWatermarks())
            .send_to(OutputDescriptor(app.config.get("test.output", "log.out"), msg_serde="json"))
        )


class SourceWindowedCount(StreamApplication):
    """Counts per partition and user per 10 s of event time, windowed right at the source (one stage, no
    intermediate stream): a restart replays only the task's own input, so its windows after a crash must
    equal a fault-free run's exactly. Pane keys are ``<partition>/<user>``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .map(Slow(app.config))
            .window(
                TumblingWindow(WINDOW_MS),
                key=lambda m: f"{m['n'] // 1000}/{m['user']}",
                aggregate=Count(),
                name="per-partition-10s",
            )
            .map(PanesAndWatermarks())
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class PanesAndWatermarks:
    """Panes as JSON, and a record of every watermark the window passed on, tagged with the task."""

    def init(self, context: TaskContext) -> None:
        self.task = str(context.task_name)

    def __call__(self, pane: WindowPane) -> dict[str, Any]:
        return {"task": self.task, "user": pane.key, "start": pane.start, "end": pane.end, "count": pane.value}

    def on_watermark(self, watermark: int) -> list[dict[str, Any]]:
        return [{"task": self.task, "watermark": watermark}] if watermark < MAX_WATERMARK else []


class Slow:
    """Sleeps ``test.delay.seconds`` per message in the task named by ``test.slow.task`` (all when unset),
    so a test can act while a job runs; and, given ``test.progress.dir``, touches a file per task there."""

    def __init__(self, config: Config) -> None:
        self.delay = float(config.get("test.delay.seconds", "0"))
        self.slow_task = config.get("test.slow.task")
        self.progress = config.get("test.progress.dir")

    def init(self, context: TaskContext) -> None:
        self.task = str(context.task_name)
        if self.slow_task is not None and self.slow_task != self.task:
            self.delay = 0.0

    def __call__(self, message: Any) -> Any:
        if self.delay:
            time.sleep(self.delay)
        return message

    def on_end_of_stream(self) -> None:
        if self.progress:
            Path(self.progress, self.task.replace(" ", "-")).touch()


def app_config(data_dir: Path, app: str, **extra: Any) -> Settings:
    values = {
        "job.name": "test",
        "job.data.dir": str(data_dir),
        "app.class": app,
        "task.commit.ms": "1000",
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return prepare(Settings(values))


def messages(partition: int, count: int, users: int = 5, start: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """``count`` messages of one partition, event time one second apart from ``start`` seconds."""
    return [
        (f"k{partition}", {"user": f"u{(i + partition) % users}", "n": 1000 * partition + i, "ts": (start + i) * 1000})
        for i in range(count)
    ]


def reference_counts(by_partition: dict[int, list[tuple[str, dict[str, Any]]]]) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for pairs in by_partition.values():
        for _, message in pairs:
            window = (message["user"], message["ts"] - message["ts"] % WINDOW_MS)
            counts[window] = counts.get(window, 0) + 1
    return counts


SESSION_GAP_MS = 3_000
JOIN_WITHIN_MS = 3_500


class JoinedInputs(StreamApplication):
    """Clicks on ``log.left`` joined with views on ``log.right`` by user, both inputs as they are: allowed
    only when the two have the same partition count."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        left = app.input(InputDescriptor("log.left", msg_serde="json", timestamp=lambda m: m["ts"]))
        right = app.input(InputDescriptor("log.right", msg_serde="json", timestamp=lambda m: m["ts"]))
        left.join(
            right, key=lambda m: m["user"], other_key=lambda m: m["user"], joiner=lambda a, b: [a, b], within_ms=1
        ).send_to(OutputDescriptor("log.out", msg_serde="json"))


class SessionsJoinAndCounts(StreamApplication):
    """The stateful operators of the high-level API in one job, each writing tagged records to ``log.out``:
    session counts per user (``SESSION_GAP_MS``), a running count per user (``map_with_state``), and
    messages with even ``n`` joined with odd ones of the same user within ``JOIN_WITHIN_MS``, each side
    through its own repartitioning."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        out = OutputDescriptor("log.out", msg_serde="json")
        messages = source(app).map(Slow(app.config))
        by_user = messages.partition_by(lambda m: m["user"], name="by-user")
        by_user.window(SessionWindow(SESSION_GAP_MS), key=lambda kv: kv.key, aggregate=Count(), name="sessions").map(
            lambda pane: {
                "kind": "session",
                "user": pane.key,
                "start": pane.start,
                "end": pane.end,
                "count": pane.value,
            }
        ).send_to(out)
        by_user.map_with_state(running_count, name="running").send_to(out)
        evens = messages.filter(lambda m: m["n"] % 2 == 0).partition_by(lambda m: m["user"], name="evens")
        odds = messages.filter(lambda m: m["n"] % 2 == 1).partition_by(lambda m: m["user"], name="odds")
        evens.join(
            odds,
            joiner=lambda even, odd: {"kind": "join", "even": even.value["n"], "odd": odd.value["n"]},
            within_ms=JOIN_WITHIN_MS,
            name="pairs",
        ).send_to(out)


def running_count(kv: Any, state: Any) -> dict[str, Any]:
    state.set(state.get(0) + 1)
    return {"kind": "running", "user": kv.key, "n": kv.value["n"], "count": state.get()}


def reference_stateful(by_partition: dict[int, list[tuple[str, dict[str, Any]]]]) -> set[tuple[Any, ...]]:
    """What ``SessionsJoinAndCounts`` writes, in plain Python, as a set of tuples (order across users and
    duplicates from a restart aside). A running count is per user in partition order: within one input
    partition a user's messages keep their order, and ``user_messages`` gives each user one partition."""
    records: set[tuple[Any, ...]] = set()
    by_user: dict[str, list[dict[str, Any]]] = {}
    for pairs in by_partition.values():
        for _, message in pairs:
            by_user.setdefault(message["user"], []).append(message)
    for user, user_messages in by_user.items():
        for count, message in enumerate(user_messages, start=1):
            records.add(("running", user, message["n"], count))
        stamps = sorted(m["ts"] for m in user_messages)
        start = last = stamps[0]
        count = 0
        for ts in stamps:
            if ts - last > SESSION_GAP_MS:
                records.add(("session", user, start, last + SESSION_GAP_MS, count))
                start, count = ts, 0
            last = ts
            count += 1
        records.add(("session", user, start, last + SESSION_GAP_MS, count))
        evens = [m for m in user_messages if m["n"] % 2 == 0]
        odds = [m for m in user_messages if m["n"] % 2 == 1]
        for even in evens:
            for odd in odds:
                if abs(even["ts"] - odd["ts"]) <= JOIN_WITHIN_MS:
                    records.add(("join", even["n"], odd["n"]))
    return records


def stateful_records(values: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """``SessionsJoinAndCounts``' output in the reference's form."""
    records: set[tuple[Any, ...]] = set()
    for value in values:
        if value["kind"] == "session":
            records.add(("session", value["user"], value["start"], value["end"], value["count"]))
        elif value["kind"] == "running":
            records.add(("running", value["user"], value["n"], value["count"]))
        else:
            records.add(("join", value["even"], value["odd"]))
    return records


def user_messages(partition: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    """Three users per partition, each only in it (so a user's running count follows the partition's
    order); a message every second, and a 10 s pause every 12 messages, which ends every session."""
    return [
        (
            f"k{partition}",
            {"user": f"p{partition}u{i % 3}", "n": 1000 * partition + i, "ts": i * 1000 + (i // 12) * 10_000},
        )
        for i in range(count)
    ]


def assert_running_counts_are_exact(values: list[dict[str, Any]]) -> None:
    """Every message has one running count (a replay after a restart repeats it, never changes it)."""
    counts: dict[int, set[int]] = {}
    for value in values:
        if value["kind"] == "running":
            counts.setdefault(value["n"], set()).add(value["count"])
    assert {n: c for n, c in counts.items() if len(c) > 1} == {}


def reference_counts_per_partition(
    by_partition: dict[int, list[tuple[str, dict[str, Any]]]],
) -> dict[tuple[str, int], int]:
    """``SourceWindowedCount``'s panes computed in plain Python: ``(partition/user, start) -> count``."""
    counts: dict[tuple[str, int], int] = {}
    for partition, pairs in by_partition.items():
        for _, message in pairs:
            window = (f"{partition}/{message['user']}", message["ts"] - message["ts"] % WINDOW_MS)
            counts[window] = counts.get(window, 0) + 1
    return counts


class HttpEnrich:
    """``async def`` enrichment from the loopback HTTP service (``tests/http_service.py``): ``m["n"]`` is sent,
    ``{**m, "e": n * 10}`` comes back; its aiohttp session opens in ``init`` and closes in ``close``, both async."""

    def __init__(self, url: str) -> None:
        self.url = f"{url}/enrich"

    async def init(self, context: TaskContext) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()

    async def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        async with self.session.get(self.url, params={"v": str(message["n"])}) as response:
            if response.status != 200:
                raise RuntimeError(f"GET {self.url}?v={message['n']} answered {response.status}")
            body = await response.json()
        return {**message, "e": body["e"]}

    async def close(self) -> None:
        await self.session.close()


class AsyncEnriched(StreamApplication):
    """``in`` → ``map_async`` (the HTTP service at ``test.service.url``) → ``out``, and a count per user per
    10 s of event time over the enriched messages to ``log.counts``: the window sees every message once.
    ``test.ordered=false`` makes the map unordered; ``test.flat=true`` a ``flat_map_async`` emitting each
    message twice."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        config = app.config
        enrich = HttpEnrich(str(config.get("test.service.url")))
        ordered = config.get("test.ordered", "true") == "true"
        timeout = int(config.get("test.timeout.ms", "30000"))
        stream = source(app)
        if config.get("test.flat", "false") == "true":

            async def twice(message: dict[str, Any]) -> list[dict[str, Any]]:
                enriched = await enrich(message)
                return [enriched, enriched]

            twice.init = enrich.init  # type: ignore[attr-defined]
            twice.close = enrich.close  # type: ignore[attr-defined]
            enriched = stream.flat_map_async(twice, concurrency=20, ordered=ordered, timeout_ms=timeout)
        else:
            enriched = stream.map_async(enrich, concurrency=20, ordered=ordered, timeout_ms=timeout)
        enriched.send_to(OutputDescriptor("log.out", msg_serde="json"))
        enriched.window(TumblingWindow(WINDOW_MS), aggregate=Count(), key=lambda m: m["user"]).map(
            lambda pane: {"user": pane.key, "start": pane.start, "count": pane.value}
        ).send_to(OutputDescriptor("log.counts", msg_serde="json"))


class RemoteJoined(StreamApplication):
    """``in`` → join with the remote table ``enrich`` (the HTTP service at ``test.service.url``, batched reads)
    on ``n`` → ``out``, and a count per user per 10 s of event time over the joined messages to ``log.counts``.
    ``test.how`` is the join's ``how`` (default ``inner``)."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        from tests.table.enrich_table import enrich_table

        config = app.config
        table = enrich_table(str(config.get("test.service.url")), batched=True, backoff_ms=5)
        joined = source(app).join(
            table,
            key=lambda m: m["n"],
            joiner=lambda m, record: {**m, "e": record["e"] if record else None},
            how=str(config.get("test.how", "inner")),
            concurrency=20,
        )
        joined.send_to(OutputDescriptor("log.out", msg_serde="json"))
        joined.window(TumblingWindow(WINDOW_MS), aggregate=Count(), key=lambda m: m["user"]).map(
            lambda pane: {"user": pane.key, "start": pane.start, "count": pane.value}
        ).send_to(OutputDescriptor("log.counts", msg_serde="json"))
