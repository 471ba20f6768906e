"""``benchmarks.scale`` counts every record a run wrote to its intermediate stream, reads files whole, and times
a pass-through's start-up and steady CPU."""

from __future__ import annotations

import math

import pytest

from benchmarks.scale import evict, fan_out_run, idle_rss, passthrough_run, restore_curve, sequential_read


def test_a_fan_out_run_counts_every_user_record_and_the_end_of_stream_of_each_producer(tmp_path):
    row = fan_out_run(tmp_path, partitions=2, messages=400, mode="baseline")
    assert row.user == 400, "every message crosses the intermediate stream once"
    assert row.control >= 2 + 1, "each of the 2 producers ends once, and the aggregating task forwards it"
    assert math.isfinite(row.end_latency) and row.end_latency >= row.control_latency >= 0
    assert row.job_end >= row.end_latency, "the job ends after its last task handled end-of-stream"
    assert row.event_seconds >= 0 and row.per_interval(200) <= row.control, "at least one interval"


@pytest.mark.spark
def test_a_fan_out_run_through_spark_counts_the_intermediate_records_and_times_end_of_stream_from_the_workers(tmp_path):
    """Through Spark the tasks run in Python workers: the counts come from the kept intermediate stream and the
    times from the notes each worker wrote, and must agree with what the job did."""
    row = fan_out_run(tmp_path, partitions=2, messages=400, mode="broadcast", runner="spark")
    assert row.user == 400, "every message crosses the intermediate stream once"
    assert row.control >= 2, "each container's end-of-stream to each of the 2 partitions at least"
    assert math.isfinite(row.end_latency) and row.end_latency >= row.control_latency >= 0
    assert row.job_end >= row.end_latency and row.event_seconds >= 0


def test_sequential_read_reads_every_byte_of_every_file_after_eviction(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 3_000_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 10)
    evict(tmp_path)
    size, seconds = sequential_read(tmp_path)
    assert size == 3_000_010 and seconds > 0


def test_the_restore_curve_restores_every_key_written_in_random_order_from_both_backends_beside_rocksdbs_own_fill(
    tmp_path, capsys
):
    restore_curve(tmp_path, keys=3_000, value_size=10, runs=2, random_order=True)  # raises when a key is missing
    out = capsys.readouterr().out
    assert "written in random order" in out and "medians of 2 runs" in out
    assert "restore from the changelog" in out and "restore from the blobstore" in out
    assert "RocksDB's own fill (db_bench)" in out and "against the engine's own fill" in out


def test_a_pass_through_run_times_its_start_up_and_its_steady_cpu_from_the_first_to_the_last_message(tmp_path):
    row = passthrough_run(tmp_path, partitions=3, messages=300)
    assert 0 < row.startup < row.seconds
    assert 0 <= row.steady_cpu_per_message * 300 <= row.cpu_per_message * 300
    assert row.end_cpu >= 0


def test_the_idle_run_measures_a_process_whose_containers_poll_every_partition(tmp_path):
    assert idle_rss(tmp_path, partitions=3) > 10 * 1024 * 1024
