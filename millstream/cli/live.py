"""``millstream job status --watch``: the status document, redrawn in the terminal while the job runs.

It renders what ``/status.json`` serves (:func:`status_document`), so the terminal and the endpoint never
disagree. Figures that need metrics (processed, throughput, commit durations, start-up progress) come
from the containers' snapshots and show ``-`` while metrics are off; the checkpointed lag is always there.
Throughput is the change in processed messages between two redraws.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from millstream.cli.common import out

Document = dict[str, Any]


def _shown(value: Any, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


class LiveView:
    """Renders status documents one after another, remembering the last for throughput."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._previous: tuple[float, dict[tuple[str, str], int]] | None = None

    def render(self, document: Document) -> RenderableType:
        now = self.clock()
        processed = {
            (cid, task): figures["processed"]
            for cid, container in document["containers"].items()
            for task, figures in container.get("tasks", {}).items()
        }
        rates: dict[tuple[str, str], float] = {}
        if self._previous is not None and now > self._previous[0]:
            seconds = now - self._previous[0]
            rates = {key: (count - self._previous[1].get(key, count)) / seconds for key, count in processed.items()}
        self._previous = (now, processed)
        if document.get("model") is None:
            return Text(f"job {document['job']['name']}: it has never run (no job model)")
        parts: list[RenderableType] = [_header(document), _containers(document, rates), _tasks(document, rates)]
        parts.append(_partitions(document))
        parts.extend(table for table in (_progress(document), _watermarks(document)) if table is not None)
        parts.extend(_failures(document))
        return Group(*parts)


def _header(document: Document) -> Text:
    model = document["model"]
    tasks = sum(len(c["tasks"]) for c in model["containers"].values())
    at = datetime.now(UTC).strftime("%H:%M:%S UTC")
    return Text(
        f"job {document['job']['name']} generation {document['generation']}: "
        f"{len(model['containers'])} container(s), {tasks} task(s) — {at}",
        style="bold",
    )


def _executor(container: Document) -> str:
    executor = container.get("executor")
    if not executor:
        return f"{container.get('host', '-')} pid {container.get('pid', '-')}"
    return (
        f"Spark task {executor.get('task_attempt_id', '-')} (partition {executor.get('partition', '-')}, "
        f"attempt {executor.get('spark_attempt', '-')}) pid {container.get('pid', '-')}"
    )


def _containers(document: Document, rates: dict[tuple[str, str], float]) -> Table:
    table = Table(title="containers", title_justify="left")
    for column in ("container", "state", "attempt", "runs as", "processed", "msg/s"):
        table.add_column(column, justify="right" if column in ("processed", "msg/s") else "left")
    for cid, container in sorted(document["containers"].items(), key=lambda item: int(item[0])):
        rate = sum(r for (owner, _), r in rates.items() if owner == cid) if rates else None
        table.add_row(
            cid,
            str(container.get("state", "-")),
            _shown(container.get("attempt")),
            _executor(container),
            _shown(container.get("processed")),
            "-" if rate is None else f"{rate:,.0f}",
        )
    return table


def _tasks(document: Document, rates: dict[tuple[str, str], float]) -> Table:
    table = Table(title="tasks", title_justify="left")
    for column in ("container", "task", "processed", "msg/s", "lag", "commits", "commit mean", "commit max"):
        table.add_column(column, justify="left" if column in ("container", "task") else "right")
    for cid, container in sorted(document["model"]["containers"].items(), key=lambda item: int(item[0])):
        live = document["containers"].get(cid, {}).get("tasks", {})
        for task in container["tasks"]:
            figures = live.get(task, {})
            timer = figures.get("commit_seconds") or {}
            rate = rates.get((cid, task))
            table.add_row(
                cid,
                task,
                _shown(figures.get("processed")),
                "-" if rate is None else f"{rate:,.0f}",
                _shown(figures.get("lag")),
                _shown(figures.get("commits")),
                "-" if "mean" not in timer else f"{timer['mean']:.3f}s",
                "-" if "max" not in timer else f"{timer['max']:.3f}s",
            )
    return table


def _partitions(document: Document) -> Table:
    table = Table(title="partitions", title_justify="left")
    for column in ("task", "partition", "checkpointed", "upcoming", "processed", "lag", "lag at checkpoint"):
        table.add_column(column, justify="left" if column in ("task", "partition") else "right")
    for row in document["partitions"]:
        table.add_row(
            row["task"],
            f"{row['system']}.{row['stream']}.{row['partition']}",
            _shown(row["checkpointed"]),
            _shown(row["upcoming"]),
            _shown(row["processed"]),
            _shown(row["lag"]),
            _shown(row["checkpoint_lag"]),
        )
    return table


def _progress(document: Document) -> Table | None:
    rows = [(cid, entry) for cid, c in document["containers"].items() for entry in c.get("progress", [])]
    if not rows:
        return None
    table = Table(title="restore and bootstrap", title_justify="left")
    for column in ("container", "measure", "of", "value"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for cid, entry in rows:
        scope = " ".join(f"{k}={v}" for k, v in sorted(entry["labels"].items()) if k not in ("container", "job"))
        value = f"{entry['value']:.3f}s ({entry['count']})" if entry.get("count") else f"{entry['value']:,.0f}"
        table.add_row(cid, entry["name"], scope or "-", value)
    return table


def _watermarks(document: Document) -> Table | None:
    if not document.get("watermarks"):
        return None
    table = Table(title="watermarks", title_justify="left")
    for column in ("container", "series", "of", "watermark"):
        table.add_column(column)
    for entry in document["watermarks"]:
        scope = " ".join(f"{k}={v}" for k, v in sorted(entry["labels"].items()) if k not in ("container", "job"))
        table.add_row(entry["container"], entry["name"], scope or "-", f"{entry['value']:.0f}")
    return table


def _failures(document: Document) -> list[Text]:
    lines = []
    for cid, container in sorted(document["containers"].items()):
        if container.get("error"):
            lines.append(Text(f"container {cid} failed: {container['error']}", style="red"))
        for name, count in sorted(container.get("failures", {}).items()):
            if count:
                lines.append(Text(f"container {cid}: {name.replace('_', ' ')}: {count:.0f}", style="yellow"))
    for task, failures in document["startpoints"]["failures"].items():
        for ssp, reason in failures.items():
            lines.append(Text(f"startpoint of {task} {ssp} could not be applied: {reason}", style="yellow"))
    return lines


def watch(document: Callable[[], Document], interval: float) -> None:
    """Redraw until Ctrl-C, every ``interval`` seconds."""
    view = LiveView()
    with Live(view.render(document()), console=out, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)  # a redraw cadence, not a synchronisation
                live.update(view.render(document()), refresh=True)
        except KeyboardInterrupt:
            return
