"""Window state in the task's operator store through the Spark runner: a container SIGKILLed at a commit
point is retried by Spark, restores its windows from the blob store or the changelog, and the job's panes
equal a plain Python reference (none lost, none counted twice); the metadata store holds no control state."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.model import SystemStream
from millstream.testing import read_stream
from tests.api.apps import app_config, messages, reference_counts_per_partition
from tests.spark.test_application import setup
from tests.spark.test_state import paused_at, run_and_kill

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(("point", "backend"), [("after-upload", "blobstore"), ("after-snapshot", "changelog")])
def test_windows_after_a_container_sigkill_at_a_commit_point_equal_a_plain_python_reference(
    spark_local, tmp_path: Path, point: str, backend: str
) -> None:
    markers = tmp_path / "markers"
    extra = {"stores__backup__factories": "blobstore", "task__checkpoint__read__versions": "2,1"}
    config = app_config(
        tmp_path,
        "tests.api.apps:SourceWindowedCount",
        job__container__count=2,
        task__commit__ms=150,
        test__delay__seconds=0.003,
        task__commit__testing__pause__at=point,
        task__commit__testing__pause__ms=60_000,
        task__commit__testing__marker__dir=str(markers),
        **(extra if backend == "blobstore" else {}),
    )
    data = {p: messages(p, 250, users=30) for p in range(4)}
    setup(config, data)
    result = run_and_kill(config, spark_local, paused_at(markers, point))
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    panes: dict[tuple[str, int], set[int]] = {}
    for _, record in read_stream(config, SystemStream("log", "out"))[0]:
        if "count" in record:
            panes.setdefault((record["user"], record["start"]), set()).add(record["count"])
    assert panes == {key: {count} for key, count in reference_counts_per_partition(data).items()}
    store = metadata_store(config)
    store.init()
    try:
        assert store.all(CONTROL_STATE_NAMESPACE) == {}
    finally:
        store.close()
