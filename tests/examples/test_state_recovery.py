"""The state-recovery example on the Spark runner: a container SIGKILLed mid-run is started again,
restores its RocksDB store from the changelog or the blob store, and the counts come out exact."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_counts_are_exact_after_a_container_is_killed(example, spark_local, tmp_path, capsys, backend):
    run = example("state_recovery")

    assert run.main(["--backend", backend, "--data-dir", str(tmp_path / "data")], spark=spark_local) == 0
    assert "containers started again: 0" not in capsys.readouterr().out
