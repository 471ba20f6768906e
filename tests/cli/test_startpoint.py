"""``millstream startpoint``: set, list and delete, with refusals that write nothing."""

from __future__ import annotations

from millstream.coordinator.prepare import load_job_config
from tests.cli.test_main import millstream, table_rows, write_config
from tests.helpers import create_stream


def setup(tmp_path):
    path = write_config(tmp_path)
    create_stream(load_job_config(path), "in", 4)
    return path


def test_set_list_and_delete_startpoints(tmp_path):
    path = setup(tmp_path)
    timestamp = millstream("startpoint", "set", path, "--stream", "log.in", "-p", "0", "-p", "3",
                           "--timestamp", "2024-05-01T12:00:00Z")  # fmt: skip
    assert timestamp.returncode == 0, timestamp.stderr
    assert "timestamp 1714564800000 set on log.in.0, log.in.3" in timestamp.stdout
    oldest = millstream("startpoint", "set", path, "--stream", "log.in", "--all-partitions", "--oldest",
                        "--task", "Partition 1")  # fmt: skip
    assert oldest.returncode == 0, oldest.stderr
    rows = table_rows(millstream("startpoint", "list", path).stdout)
    assert sorted((row[0], row[1], row[2], row[3]) for row in rows) == sorted(
        [("pending", "log.in.0", "(all tasks)", "timestamp 1714564800000"),
         ("pending", "log.in.3", "(all tasks)", "timestamp 1714564800000")]
        + [("pending", f"log.in.{p}", "Partition 1", "oldest") for p in range(4)]
    )  # fmt: skip
    deleted = millstream("startpoint", "delete", path, "--stream", "log.in", "-p", "0")
    assert deleted.returncode == 0 and "deleted 2 startpoint(s)" in deleted.stdout  # SSP-wide and per task
    assert millstream("startpoint", "delete", path).stdout.strip() == "deleted 4 startpoint(s)"
    assert millstream("startpoint", "list", path).stdout.strip() == "no startpoints"


def test_bad_requests_exit_2_naming_the_problem_and_write_nothing(tmp_path):
    path = setup(tmp_path)
    cases = [
        (["--stream", "log.nope", "-p", "0", "--oldest"], "log.nope"),
        (["--stream", "log.in", "-p", "9", "--oldest"], "partition 9 of 'log.in' does not exist"),
        (["--stream", "log.in", "-p", "0", "--timestamp", "last tuesday"], "'last tuesday' is not a timestamp"),
        (["--stream", "log.in", "-p", "0", "--oldest", "--upcoming"], "exactly one of"),
        (["--stream", "log.in", "--oldest"], "--all-partitions"),
    ]
    for args, message in cases:
        result = millstream("startpoint", "set", path, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    assert millstream("startpoint", "list", path).stdout.strip() == "no startpoints"
