"""A run whose container is stopped (``SIGSTOP``) while it holds the SQLite metadata store's write lock, and a
superseding ``millstream run`` of the same job: it names the holder while it waits, ends it once the holder's
lease has expired, and runs the job to the end (issue 38, item 1)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from millstream.config.settings import Settings
from millstream.file_locks import process_state
from tests.helpers import create_stream, fill, job_config, output_origins, seal, wait_until

REPO = Path(__file__).resolve().parents[2]
STOP_AT = "checkpoint-v1"


def _job(tmp_path: Path) -> tuple[Path, Settings]:
    values = {
        "job.name": "test",
        "job.data.dir": str(tmp_path / "data"),
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.in",
        "task.commit.ms": "100",
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
        "metadata.store.lock.lease.ms": "2000",
        "metadata.store.lock.wait.ms": "200",
        "metadata.store.testing.stop.in.write": STOP_AT,
        "metadata.store.testing.marker.dir": str(tmp_path / "markers"),
    }
    config_file = tmp_path / "job.yaml"
    config_file.write_text("".join(f"{key}: '{value}'\n" for key, value in values.items()))
    return config_file, job_config(
        tmp_path / "data", **{key.replace(".", "__"): value for key, value in values.items()}
    )


def test_a_superseding_run_names_the_stopped_lock_holder_and_takes_over_after_its_lease(tmp_path):
    config_file, config = _job(tmp_path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    written = fill(config, "in", 2, 20)
    run = [sys.executable, "-m", "millstream.cli.main", "run", str(config_file), "--in-process"]
    first = subprocess.Popen(run, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker = tmp_path / "markers" / f"metadata-write-{STOP_AT}"
        wait_until(lambda: marker.exists() and process_state(first.pid) == "stopped", 90, "the first run stopped")
        assert marker.read_text() == str(first.pid)
        seal(config, "in")
        second = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stderr
        holder = rf"held by container \S+ attempt 1 pid {first.pid} on host {re.escape(socket.gethostname())} since "
        assert re.search(holder, second.stderr), second.stderr
        assert f"ending pid {first.pid} so this newer run can take over" in second.stderr
        assert "generation 2: finished" in second.stdout
        assert first.wait(30) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=30)
    assert set(output_origins(config)) == written
