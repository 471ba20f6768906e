"""``benchmarks.scale_plot`` turns one run's figures into ratios to each curve's smallest point, keeps the figures
as JSON, and draws them into one PNG that ``benchmarks.scale --replot`` redraws from the JSON alone."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from benchmarks import scale, scale_plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def document() -> dict[str, Any]:
    """A small fixed run: two points per curve, with round figures whose ratios are known."""
    return {
        "title": "test run",
        "load": [["start", 3.0], ["fanout", 5.5]],
        "partitions": [
            {
                "partitions": 4,
                "seconds": 1.0,
                "cpu_per_message": 2e-6,
                "startup": 0.1,
                "steady_cpu_per_message": 1e-6,
                "end_cpu": 0.01,
                "rss": 60_000_000,
            },
            {
                "partitions": 64,
                "seconds": 3.0,
                "cpu_per_message": 8e-6,
                "startup": 0.5,
                "steady_cpu_per_message": 1.5e-6,
                "end_cpu": 0.2,
                "rss": 60_000_000 + 60 * 150 * 1024,
            },
        ],
        "tasks": [
            {
                "tasks": 10,
                "startup_seconds": 1.0,
                "startup_cpu": 0.5,
                "commit_cpu": 0.02,
                "commit_seconds": 0.03,
                "idle_cpu": 0.001,
                "idle_seconds": 0.002,
                "batches": 1,
            },
            {
                "tasks": 100,
                "startup_seconds": 5.0,
                "startup_cpu": 4.0,
                "commit_cpu": 0.3,
                "commit_seconds": 0.4,
                "idle_cpu": 0.004,
                "idle_seconds": 0.005,
                "batches": 1,
            },
        ],
        "fanout": [
            {
                "size": 4,
                "mode": "baseline",
                "seconds": 10.0,
                "user": 1000,
                "control": 5,
                "end_latency": 1.0,
                "control_latency": 0.5,
            },
            {
                "size": 4,
                "mode": "aggregated",
                "seconds": 12.0,
                "user": 1000,
                "control": 8,
                "end_latency": 1.0,
                "control_latency": 0.5,
            },
            {
                "size": 32,
                "mode": "baseline",
                "seconds": 20.0,
                "user": 1000,
                "control": 40,
                "end_latency": 1.0,
                "control_latency": 0.5,
            },
            {
                "size": 32,
                "mode": "aggregated",
                "seconds": 25.0,
                "user": 1000,
                "control": 9,
                "end_latency": 1.0,
                "control_latency": 0.5,
            },
        ],
        "restore": [
            {
                "keys": 1000,
                "value_size": 100,
                "bytes": 200_000_000,
                "disk_seconds": 0.5,
                "changelog": {"seconds": 2.0, "cpu": 1.0},
                "blobstore": {"seconds": 0.4, "cpu": 0.0},
            },
        ],
    }


def test_every_curve_is_given_as_ratios_to_its_smallest_point():
    run = document()
    partitions = scale_plot.partitions_ratios(run["partitions"])
    assert partitions["size"] == [1.0, 16.0]
    assert partitions["cpu_per_message"] == pytest.approx([1.0, 4.0])
    assert partitions["steady_cpu_per_message"] == pytest.approx([1.0, 1.5])
    assert partitions["startup"] == pytest.approx([1.0, 5.0])
    tasks = scale_plot.tasks_ratios(run["tasks"])
    assert tasks["size"] == [1.0, 10.0]
    assert tasks["commit_cpu"] == pytest.approx([1.0, 15.0])
    assert tasks["idle_cpu"] == pytest.approx([1.0, 4.0])
    assert tasks["startup_cpu"] == pytest.approx([1.0, 8.0])


def test_the_kafka_tasks_curve_is_drawn_beside_the_logs_under_its_own_labels():
    run = document()
    run["tasks_kafka"] = [dict(row, commit_cpu=row["commit_cpu"] * 2) for row in run["tasks"]]
    curves, counts = scale_plot._tasks_curves(run)
    assert counts == [row["tasks"] for row in run["tasks"]]
    assert curves["commit round CPU"] == pytest.approx([1.0, 15.0])
    assert curves["Kafka: commit round CPU"] == pytest.approx([1.0, 15.0])
    assert set(curves) == {
        f"{system}{label}"
        for system in ("", "Kafka: ")
        for label in ("commit round CPU", "idle commit round CPU", "start-up CPU")
    }
    del run["tasks"]
    assert set(scale_plot._tasks_curves(run)[0]) == {
        "Kafka: commit round CPU",
        "Kafka: idle commit round CPU",
        "Kafka: start-up CPU",
    }


def test_the_fan_out_is_given_per_mode_as_control_per_user_record_and_time_against_the_same_sizes_baseline():
    series = scale_plot.fanout_series(document()["fanout"])
    assert series["aggregated"]["size"] == [4, 32]
    assert series["aggregated"]["control_per_user"] == pytest.approx([0.008, 0.009])
    assert series["aggregated"]["x_baseline"] == pytest.approx([1.2, 1.25])
    assert series["baseline"]["x_baseline"] == pytest.approx([1.0, 1.0])


def test_a_restore_is_given_as_a_fraction_of_the_disks_read_by_wall_and_by_cpu_time():
    series = scale_plot.restore_series(document()["restore"])
    # the disk read 200 MB in 0.5 s (400 MB/s): the changelog's 2 s is a quarter of it, its 1 CPU s half
    assert series["changelog"]["x_disk"] == pytest.approx([0.25])
    assert series["changelog"]["x_disk_cpu"] == pytest.approx([0.5])
    assert series["blobstore"]["x_disk"] == pytest.approx([1.25])
    assert math.isnan(series["blobstore"]["x_disk_cpu"][0]), "no CPU time measured: no ratio, not a division error"
    assert "engine" not in series, "a row without the engine's fill draws no engine line"


def test_the_engines_own_fill_is_given_against_the_disk_as_the_restores_are():
    row = {**document()["restore"][0], "engine": {"seconds": 1.0, "cpu": 2.0}}
    series = scale_plot.restore_series([row])
    assert series["engine"]["x_disk"] == pytest.approx([0.5]) and series["engine"]["x_disk_cpu"] == pytest.approx(
        [0.25]
    )
    assert series["changelog"]["x_disk"] == pytest.approx([0.25]), "the restores' lines are unchanged beside it"


def test_a_ratio_to_a_zero_first_point_is_not_a_number():
    assert all(math.isnan(value) for value in scale_plot.ratios([0.0, 2.0]))
    assert scale_plot.ratios([]) == []


def test_the_figures_are_written_as_json_and_replotted_into_a_png_beside_them(tmp_path, monkeypatch):
    figures = tmp_path / "assets" / "scale.json"
    scale_plot.write_json(document(), figures)
    assert scale_plot.read_json(figures) == document()
    monkeypatch.setattr(sys, "argv", ["scale", "--replot", str(figures)])
    scale.main()  # runs no curve: only draws
    assert (tmp_path / "assets" / "scale.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_run_of_some_curves_only_still_draws_its_plot(tmp_path):
    run = {key: value for key, value in document().items() if key in ("title", "load", "tasks")}
    target = tmp_path / "scale.png"
    scale_plot.plot(run, target)
    assert target.read_bytes().startswith(PNG_SIGNATURE)


def test_a_run_measures_the_tasks_curve_with_commit_scale_and_writes_its_figures_and_plot(tmp_path, monkeypatch):
    target = tmp_path / "scale.png"
    argv = ["scale", "--fanout", "", "--partitions", "", "--keys", "0", "--tasks", "1,3", "--task-rounds", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--plot", str(target)])
    scale.main()
    run = scale_plot.read_json(tmp_path / "scale.json")
    assert [row["tasks"] for row in run["tasks"]] == [1, 3]
    assert all(row["commit_cpu"] > 0 and row["startup_seconds"] > 0 for row in run["tasks"])
    assert "fanout" not in run and "partitions" not in run and "restore" not in run, "empty sizes leave curves out"
    assert [label for label, _ in run["load"]] == ["start", "tasks"]
    assert target.read_bytes().startswith(PNG_SIGNATURE)
