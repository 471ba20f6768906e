"""Running one contender as a process tree and measuring what it cost: CPU seconds and peak memory.

Every contender runs in its own process (its own venv's interpreter for the peers), and some start
more processes (Spark's JVM and Python workers, Bytewax's worker threads do not), so the cost is that
of the whole tree, sampled: CPU is the larger of the sum over every process seen of its last user+system
time and what the kernel accounted to the reaped tree (which catches the last fraction of a second
between samples), peak RSS the largest sum of resident memory at one sample.
"""

from __future__ import annotations

import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SAMPLE_SECONDS = 0.2


class ContenderFailedError(RuntimeError):
    """A contender's process exited non-zero or overran its time; the message holds its output's tail."""


@dataclass(frozen=True)
class ProcessCost:
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int
    stdout: str
    cpu_series: tuple[tuple[float, float], ...]
    """(wall-clock time, CPU seconds of the tree so far) at each sample: the CPU of any window of the run."""


def _sample(root: psutil.Process, cpu: dict[int, float]) -> int:
    rss = 0
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        try:
            times = process.cpu_times()
            cpu[process.pid] = times.user + times.system + times.children_user + times.children_system
            rss += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return rss


def run_measured(
    command: list[str], cwd: Path, log: Path, timeout: float, env: dict[str, str] | None = None
) -> ProcessCost:
    """Run ``command`` to its end, its output in ``log``; raise :class:`ContenderFailedError` on a non-zero exit
    or after ``timeout`` seconds (the tree is killed first)."""
    cpu: dict[int, float] = {}
    series: list[tuple[float, float]] = []
    peak = 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, env=env)
        root = psutil.Process(process.pid)
        while process.poll() is None:
            peak = max(peak, _sample(root, cpu))
            series.append((time.time(), sum(cpu.values())))
            if time.perf_counter() - started > timeout:
                _kill_tree(root)
                process.wait()
                raise ContenderFailedError(f"ran over {timeout:.0f} s\n{' '.join(command)}\nsee {log}:\n{_tail(log)}")
            time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if process.returncode != 0:
        raise ContenderFailedError(
            f"exited {process.returncode}: {_last_error(log)}\n{' '.join(command)}\nsee {log}:\n{_tail(log)}"
        )
    total = max(reaped, sum(cpu.values()))
    series.append((time.time(), total))
    return ProcessCost(wall, total, peak, log.read_text(), tuple(series))


def _kill_tree(root: psutil.Process) -> None:
    for process in [*root.children(recursive=True), root]:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue


def _tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _last_error(log: Path) -> str:
    """The last line of the output that names an error (else the last line), for a one-line reason."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or ["no output"])[-1][:200]
