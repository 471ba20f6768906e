"""``millstream plan`` and ``millstream run --stage``: an application's stages, shown and run one by one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import create_stream
from tests.operators.test_planner import app_config

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


def test_millstream_run_stage_runs_each_stage_as_its_own_job(tmp_path):
    from millstream.model import SystemStream
    from millstream.testing import read_stream, write_stream
    from tests.api.apps import messages
    from tests.helpers import seal

    config_file = tmp_path / "job.yaml"
    config_file.write_text(
        f"job.name: hops\njob.data.dir: {tmp_path}\napp.class: tests.api.apps:TwoHops\n"
        "systems.log.samza.key.serde: string\nsystems.log.samza.msg.serde: json\n"
        "systems.log.samza.offset.default: oldest\nsystems.log.auto.create.streams: true\n"
    )
    config = app_config(tmp_path)
    create_stream(config, "in", 2)
    for partition in range(2):
        write_stream(config, SystemStream("log", "in"), messages(partition, 5), partition=partition)
    seal(config, "in")
    for stage in ("0", "1", "2"):
        run = [sys.executable, "-m", "millstream.cli.main", "run", str(config_file), "--stage", stage, "--in-process"]
        result = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert f"job hops-stage-{stage} generation 1: finished" in result.stdout
    delivered = [value["n"] for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]
    assert sorted(delivered) == [0, 1, 2, 3, 4, 1000, 1001, 1002, 1003, 1004]
