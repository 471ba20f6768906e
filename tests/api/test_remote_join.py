"""``stream.join(remote_table, ...)`` in-process: an async lookup join with ``map_async``'s guarantees. Every
message joined once, in offset order per partition, with reads batched and the service's transient failures
retried; an inner join drops the messages without a record, a left join keeps them with None; a window
downstream counts exactly the messages joined."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from millstream import RemoteTable
from millstream.api.application import InputDescriptor, StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.config.settings import Settings
from millstream.testing import InProcessRunner
from tests.api.apps import reference_counts
from tests.api.test_map_async import by_partition, map_async_job, read, written
from tests.http_service import ServiceSettings, enrich_service

APP = "tests.api.apps:RemoteJoined"
MISSING = frozenset(n for p in range(2) for n in range(1000 * p, 1000 * p + 150, 10))


def check_joined(config: Settings, data: dict[int, list], how: str) -> None:
    out = read(config, "out")
    kept = {p: [n for n in ns if how == "left" or n not in MISSING] for p, ns in written(data).items()}
    assert by_partition(out) == kept, "each joined once, in offset order per partition"
    assert all(m["e"] == (None if m["n"] in MISSING else m["n"] * 10) for m in out)
    counts: Counter[tuple[str, int]] = Counter()
    for pane in read(config, "counts"):
        counts[(pane["user"], pane["start"])] += pane["count"]
    joined = {p: [(k, m) for k, m in pairs if how == "left" or m["n"] not in MISSING] for p, pairs in data.items()}
    assert dict(counts) == reference_counts(joined)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_remote_join_joins_every_message_once_in_order_with_batched_retried_reads(tmp_path, how):
    with enrich_service(ServiceSettings(latency=(0.0, 0.01), flaky=1, missing=MISSING)) as service:
        config, data = map_async_job(tmp_path, service, app__class=APP, test__how=how)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
        assert max(service.counts.batches) > 1, "reads went out in batches"
    check_joined(config, data, how)


def test_a_join_with_a_remote_table_refuses_a_missing_key_and_an_unknown_how():
    app = StreamApplicationDescriptor(Settings({}))
    stream = app.input(InputDescriptor("log.in"))

    async def read(key: Any) -> Any:
        return None

    table = RemoteTable("t", read)
    with pytest.raises(ApplicationError, match="join with remote table 't': key= is required"):
        stream.join(table, joiner=lambda m, r: m)
    with pytest.raises(ApplicationError, match="how must be 'inner' or 'left'"):
        stream.join(table, key=lambda m: m, joiner=lambda m, r: m, how="outer")
