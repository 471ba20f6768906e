"""The docs page's plot: each contender's W1 and W2 steady-state rate and CPU per message, side by side
(on a loaded machine the CPU per message is the steadier of the two), the copy limit marked."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from benchmarks.peers.report import LIMIT_COPY, Outcome, outcomes_from_json

WORKLOADS = (("w1", "W1 pass-through", "#3f51b5"), ("w2", "W2 count per key", "#ff9800"))
HEIGHT = 0.38


def _bars(axes: Axes, outcomes: Sequence[Outcome], names: list[str], value: Callable[[Outcome], float]) -> None:
    by_key = {(o.contender, o.workload): o for o in outcomes}
    for index, (workload, label, colour) in enumerate(WORKLOADS):
        offset = (index - 0.5) * HEIGHT
        ran = [by_key.get((n, workload)) for n in names]
        values = [value(o) if o is not None and o.runs and not o.not_run else 0 for o in ran]
        bars = axes.barh([i + offset for i in range(len(names))], values, HEIGHT, color=colour, label=label)
        for bar, outcome in zip(bars, ran, strict=True):
            if outcome is not None and outcome.not_run:
                axes.text(0, bar.get_y() + HEIGHT / 2, " not run", va="center", fontsize=8, color="grey")
    axes.set_yticks(range(len(names)), names)


def plot_rates(outcomes: Sequence[Outcome], title: str, target: Path) -> None:
    names = list(dict.fromkeys(o.contender for o in outcomes))
    figure, (rates, cpu) = plt.subplots(1, 2, figsize=(12, 0.5 * len(names) + 1.8), sharey=True)
    _bars(rates, outcomes, names, lambda o: o.rate)
    copy = next((o for o in outcomes if o.contender == LIMIT_COPY and o.runs and not o.not_run), None)
    if copy is not None:
        rates.axvline(copy.rate, color="grey", linestyle="--", linewidth=1, label="copy limit")
    rates.invert_yaxis()  # once: the axes share it
    rates.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:,.0f}k"))
    rates.set_xlabel("steady-state messages / s (higher is better)")
    _bars(cpu, outcomes, names, lambda o: o.cpu_per_million)
    cpu.set_xscale("log")  # Faust costs some 50 times what the others do
    cpu.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    cpu.set_xlabel("CPU seconds per million messages, log scale (lower is better)")
    figure.suptitle(title, fontsize=10)
    handles, labels = rates.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
    figure.savefig(target, dpi=110)
    plt.close(figure)


if __name__ == "__main__":  # python -m benchmarks.peers.plot <peers.json>: redraw peers.png beside it
    source = Path(sys.argv[1])
    data = json.loads(source.read_text())
    plot_rates(outcomes_from_json(data), data["title"], source.with_name("peers.png"))
