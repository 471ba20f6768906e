"""The figures of one ``benchmarks/scale.py`` run as a JSON document and as one plot of every curve as ratios.

The JSON holds the measured figures, not the ratios (they are derived, here, when drawing), so a plot can be
redrawn from it without running the benchmark again: ``python -m benchmarks.scale --replot scale.json``. Every
curve is drawn relative to its own smallest point, beside the line of growth in proportion to the size where that
helps the reader judge a curve (a cost growing slower than its size is a per-item cost that falls). Absolute
figures of a shared machine move with its load; ratios taken within one run move much less.

Document layout (every section optional; a run may leave curves out)::

    {"title": str, "load": [[label, 1-min load average], ...],
     "partitions": [{"partitions": P, "seconds", "cpu_per_message", "startup", "steady_cpu_per_message",
                     "end_cpu", "rss" (bytes or null)}, ...],
     "tasks": [{"tasks": N, "startup_seconds", "startup_cpu", "commit_cpu", "commit_seconds", "idle_cpu",
                "idle_seconds", "batches"}, ...],
     "fanout": [{"size": P, "mode", "seconds", "user", "control", "end_latency", "control_latency"}, ...],
     "restore": [{"keys", "value_size", "bytes", "disk_seconds",
                  "changelog": {"seconds", "cpu"}, "blobstore": {"seconds", "cpu"},
                  "engine" (optional: RocksDB's own fill, db_bench): {"seconds", "cpu"}}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

FANOUT_MODES = ("baseline", "timer", "broadcast", "aggregated-timer", "aggregated")
SOURCES = ("changelog", "blobstore")
ENGINE = "engine"
"""A restore row's optional reference: RocksDB's own native fill of the same keys (``benchmarks.engine_fill``)."""


def ratios(values: Sequence[float]) -> list[float]:
    """Each value over the first (the curve's smallest point); NaN where the first is zero, as no ratio exists."""
    first = values[0] if values else 0.0
    return [value / first if first else float("nan") for value in values]


def partitions_ratios(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """The partitions curve against its smallest P: size, whole-run and steady CPU per message, start-up."""
    return {
        "size": ratios([row["partitions"] for row in rows]),
        "cpu_per_message": ratios([row["cpu_per_message"] for row in rows]),
        "steady_cpu_per_message": ratios([row["steady_cpu_per_message"] for row in rows]),
        "startup": ratios([row["startup"] for row in rows]),
    }


def tasks_ratios(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """The tasks curve against its smallest N: size, full and idle commit round CPU, start-up CPU."""
    return {
        "size": ratios([row["tasks"] for row in rows]),
        "commit_cpu": ratios([row["commit_cpu"] for row in rows]),
        "idle_cpu": ratios([row["idle_cpu"] for row in rows]),
        "startup_cpu": ratios([row["startup_cpu"] for row in rows]),
    }


def fanout_series(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per mode, over P: control records per user record, and wall time against the same P's baseline."""
    baseline = {row["size"]: row["seconds"] for row in rows if row["mode"] == "baseline"}
    series: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        mode = series.setdefault(row["mode"], {"size": [], "control_per_user": [], "x_baseline": []})
        mode["size"].append(row["size"])
        mode["control_per_user"].append(row["control"] / max(row["user"], 1))
        base = baseline.get(row["size"])
        mode["x_baseline"].append(row["seconds"] / base if base else float("nan"))
    return series


def restore_series(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per source, over the key counts: restore MB/s as a fraction of the disk's sequential read, by wall time and
    by CPU time (what an idle core would give); the engine's own fill of the same bytes too, where a row has it."""
    series: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        disk = row["bytes"] / row["disk_seconds"]
        for source in (source for source in (*SOURCES, ENGINE) if source in row):
            took = row[source]
            line = series.setdefault(source, {"keys": [], "x_disk": [], "x_disk_cpu": []})
            line["keys"].append(row["keys"])
            line["x_disk"].append(row["bytes"] / took["seconds"] / disk)
            line["x_disk_cpu"].append(row["bytes"] / took["cpu"] / disk if took["cpu"] else float("nan"))
    return series


def write_json(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _plain(value: float, _: object = None) -> str:
    """1,000 and 0.5, not 1e+03 and 5e-01."""
    return f"{value:,.0f}" if value >= 1 and value == int(value) else f"{value:g}"


def _log_axes(axes: Any, ticks: Sequence[float], base: float = 10) -> None:
    """Log scales with plain numbers (1, 10, 0.5), not powers; the x ticks at the measured sizes."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.set_xscale("log", base=base)
    axes.set_yscale("log")
    axes.set_xticks(list(ticks))
    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    plain = FuncFormatter(_plain)
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())


def _growth(axes: Any, sizes: list[float], curves: dict[str, list[float]], title: str, unit: str) -> None:
    """Ratio curves over the sizes, log-log, with the line of growth in proportion to the size (its ratio)."""
    axes.plot(sizes, ratios(sizes), color="grey", linestyle="--", linewidth=1, label=f"x {unit} (linear)")
    for label, values in curves.items():
        axes.plot(sizes, values, marker="o", label=label)
    _log_axes(axes, sizes)
    axes.set_title(title, fontsize=9)
    axes.set_xlabel(unit, fontsize=8)
    axes.set_ylabel("x the smallest", fontsize=8)
    axes.legend(fontsize=7, frameon=False)


def _per_mode(axes: Any, series: dict[str, dict[str, list[float]]], figure: str, target: float, title: str) -> None:
    for mode in FANOUT_MODES:
        if mode in series:
            axes.plot(series[mode]["size"], series[mode][figure], marker="o", label=mode)
    axes.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"issue 36's bound ({target:g})")
    _log_axes(axes, sorted({size for line in series.values() for size in line["size"]}), base=2)
    if figure == "x_baseline":  # within a few times the baseline: a linear scale reads better
        from matplotlib.ticker import FuncFormatter

        axes.set_yscale("linear")
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.set_title(title, fontsize=9)
    axes.set_xlabel("P = Q partitions", fontsize=8)
    axes.legend(fontsize=7, frameon=False)


def _restore(axes: Any, series: dict[str, dict[str, list[float]]]) -> None:
    for (source, line), colour in zip(series.items(), ("#3f51b5", "#ff9800", "#4caf50"), strict=False):
        axes.plot(line["keys"], line["x_disk"], marker="o", color=colour, label=f"{source}, wall")
        axes.plot(
            line["keys"], line["x_disk_cpu"], marker="s", linestyle=":", color=colour, label=f"{source}, per CPU s"
        )
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="the disk's sequential read")
    axes.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="issue 36's bound (0.5)")
    _log_axes(axes, sorted({keys for line in series.values() for keys in line["keys"]}))
    axes.set_title("restore: MB/s as a fraction of the disk's read", fontsize=9)
    axes.set_xlabel("keys in the store", fontsize=8)
    axes.legend(fontsize=7, frameon=False)


def plot(document: dict[str, Any], target: Path) -> None:
    """One PNG of every curve in ``document``: a subplot per curve and figure, each as ratios; a run of some curves
    only draws those (a grid of up to three columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(document)
    columns = min(3, max(len(panels), 1))
    rows = max(1, -(-len(panels) // columns))
    figure, grid = plt.subplots(rows, columns, figsize=(5 * columns, 4.25 * rows), squeeze=False)
    cells = list(grid.flat)
    for cell, draw in zip(cells, panels, strict=False):
        draw(cell)
    for cell in cells:
        if not cell.has_data():
            cell.set_axis_off()
    loads = [load for _, load in document.get("load", [])]
    during = f"  (1-min load average during the run: {min(loads):.1f} to {max(loads):.1f})" if loads else ""
    title = f"{document.get('title', 'benchmarks.scale')}{during}"
    figure.suptitle(title if columns > 1 else title.replace(" (", "\n("), fontsize=10 if columns > 1 else 8)
    figure.tight_layout(rect=(0, 0, 1, 0.93 if columns > 1 else 0.88))
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=100)
    plt.close(figure)


def _panels(document: dict[str, Any]) -> list[Callable[[Any], None]]:
    """A drawing per subplot, for the curves ``document`` holds, in the order of the full figure."""
    panels: list[Callable[[Any], None]] = []
    if document.get("partitions"):
        rows = document["partitions"]
        shown = partitions_ratios(rows)
        labels = {"cpu_per_message": "CPU / msg, whole run", "steady_cpu_per_message": "CPU / msg, steady"}
        curves = {
            labels.get(key, "start-up"): shown[key] for key in ("cpu_per_message", "steady_cpu_per_message", "startup")
        }
        title = "partitions: pass-through CPU per message, start-up"
        sizes = [row["partitions"] for row in rows]
        panels.append(lambda cell: _growth(cell, sizes, curves, title, "partitions"))
    tasks_curves, task_counts = _tasks_curves(document)
    if tasks_curves:
        tasks_title = "tasks: commit round CPU (full, idle), start-up CPU"
        panels.append(lambda cell: _growth(cell, task_counts, tasks_curves, tasks_title, "tasks"))
    if document.get("fanout"):
        series = fanout_series(document["fanout"])
        control = "P x Q fan-out: control records per user record"
        wall = "P x Q fan-out: wall time, x the job without event time"
        panels.append(lambda cell: _per_mode(cell, series, "control_per_user", 0.01, control))
        panels.append(lambda cell: _per_mode(cell, series, "x_baseline", 1.5, wall))
    if document.get("restore"):
        restore = restore_series(document["restore"])
        panels.append(lambda cell: _restore(cell, restore))
    if len([row for row in document.get("partitions") or [] if row.get("rss")]) >= 2:
        idle = document["partitions"]
        panels.append(lambda cell: _idle_memory(cell, idle))
    return panels


def _tasks_curves(document: dict[str, Any]) -> tuple[dict[str, list[float]], list[float]]:
    """The tasks curves of the embedded log (``tasks``) and of Kafka (``tasks_kafka``), where measured, over the
    counts of the first (the runs of one invocation share their counts)."""
    labels = {"commit_cpu": "commit round CPU", "idle_cpu": "idle commit round CPU", "startup_cpu": "start-up CPU"}
    curves: dict[str, list[float]] = {}
    counts: list[float] = []
    for key, system in (("tasks", ""), ("tasks_kafka", "Kafka: ")):
        rows = document.get(key)
        if not rows:
            continue
        counts = counts or [row["tasks"] for row in rows]
        shown = tasks_ratios(rows)
        curves.update({f"{system}{label}": shown[figure] for figure, label in labels.items()})
    return curves, counts


def _idle_memory(axes: Any, rows: Sequence[dict[str, Any]]) -> None:
    """KB per idle partition added beyond the smallest P (``--idle``), when measured."""
    measured = [row for row in rows if row.get("rss")]
    if len(measured) < 2:
        return
    first = measured[0]
    sizes = [row["partitions"] for row in measured[1:]]
    per = [(row["rss"] - first["rss"]) / (row["partitions"] - first["partitions"]) / 1024 for row in measured[1:]]
    axes.plot(sizes, per, marker="o", label="RSS per idle partition added")
    axes.axhline(100, color="grey", linestyle="--", linewidth=1, label="issue 36's bound (100 KB)")
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [f"{size:,}" for size in sizes])
    axes.set_title("partitions: memory per idle partition (KB)", fontsize=9)
    axes.set_xlabel("partitions", fontsize=8)
    axes.legend(fontsize=7, frameon=False)
