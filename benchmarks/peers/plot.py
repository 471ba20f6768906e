"""The docs page's plot: each contender's W1 and W2 steady-state rate, with the copy limit marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.peers.report import LIMIT_COPY, Outcome


def plot_rates(outcomes: Sequence[Outcome], title: str, target: Path) -> None:
    names = list(dict.fromkeys(o.contender for o in outcomes))
    by_key = {(o.contender, o.workload): o for o in outcomes if o.runs and not o.not_run}
    figure, axes = plt.subplots(figsize=(9, 0.55 * len(names) + 1.6))
    height = 0.38
    for offset, workload, colour in ((-height / 2, "w1", "#3f51b5"), (height / 2, "w2", "#ff9800")):
        rates = [by_key[(n, workload)].rate if (n, workload) in by_key else 0 for n in names]
        bars = axes.barh([i + offset for i in range(len(names))], rates, height, color=colour, label=workload.upper())
        for bar, name in zip(bars, names, strict=True):
            if (name, workload) not in by_key:
                axes.text(0, bar.get_y() + height / 2, " not run", va="center", fontsize=8, color="grey")
    if (LIMIT_COPY, "w1") in by_key:
        axes.axvline(by_key[(LIMIT_COPY, "w1")].rate, color="grey", linestyle="--", linewidth=1, label="copy limit")
    axes.set_yticks(range(len(names)), names)
    axes.invert_yaxis()
    axes.set_xlabel("steady-state messages / s (median of runs)")
    axes.set_title(title, fontsize=10)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)
