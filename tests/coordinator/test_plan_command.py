"""``millstream plan``: the stages and streams of an application, printed without creating anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.coordinator.test_planner import app_config
from tests.helpers import create_stream

REPO = Path(__file__).resolve().parents[2]


def test_millstream_plan_prints_each_stage_with_its_streams(tmp_path):
    config_file = tmp_path / "job.yaml"
    config_file.write_text(
        f"job.name: views\njob.data.dir: {tmp_path}\n"
        "app.class: tests.api.apps:TwoHops\napp.intermediate.partitions: 3\n"
    )
    create_stream(app_config(tmp_path), "in", 2)
    command = [sys.executable, "-m", "millstream.cli.main", "plan", str(config_file)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "application tests.api.apps:TwoHops: 3 stage(s); intermediate streams views-1-<name>, 3 partition(s)",
        "stage 0",
        "  input         log.in (2 partitions)",
        "  operators     by-user",
        "  repartitions  log.views-1-by-user (3 partitions, created on first run)",
        "stage 1",
        "  reads         log.views-1-by-user (3 partitions, created on first run)",
        "  operators     map-0 → by-residue",
        "  repartitions  log.views-1-by-residue (3 partitions, created on first run)",
        "stage 2",
        "  reads         log.views-1-by-residue (3 partitions, created on first run)",
        "  operators     map-1 → send_to-0",
        "  output        log.out (missing)",
    ]
    one = subprocess.run([*command, "--stage", "1"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert one.stdout.splitlines()[1:] == result.stdout.splitlines()[5:9]
    wrong = subprocess.run([*command, "--stage", "7"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "'app.stage' is 7" in wrong.stderr
