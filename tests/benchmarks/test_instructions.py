"""``benchmarks.instructions`` counts every thread's instructions of a block under callgrind, and nothing elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.commit_scale import Measured, table
from benchmarks.instructions import InstructionCounter, InstructionCountError

ROOT = Path(__file__).resolve().parents[2]

COUNTING = textwrap.dedent(
    """
    import threading
    from benchmarks.instructions import InstructionCounter

    def work(n):
        total = 0
        for value in range(n):
            total += value & 7
        return total

    counter = InstructionCounter()
    with counter.window("small") as small:
        work(20_000)
    with counter.window("large") as large:
        work(200_000)
    with counter.window("thread") as threaded:
        thread = threading.Thread(target=work, args=(200_000,))
        thread.start()
        thread.join()
    counter.close()
    print(small.instructions, large.instructions, threaded.instructions)
    """
)


def test_counting_instructions_outside_callgrind_is_refused_with_the_command_to_run():
    with pytest.raises(InstructionCountError, match="valgrind --tool=callgrind --instr-atstart=no"):
        InstructionCounter()


def test_under_callgrind_a_window_counts_its_blocks_instructions_in_every_thread_and_leaves_no_dump(tmp_path):
    script = tmp_path / "counting.py"
    script.write_text(COUNTING)
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    small, large, threaded = (int(value) for value in run.stdout.split())
    assert 8 < large / small < 12, "ten times the loop, about ten times the instructions"
    assert 0.8 < threaded / large < 1.2, "a thread's work inside the window is counted"
    left = sorted(path.name for path in tmp_path.glob("callgrind.out.*"))
    assert len(left) == 1 and "." not in left[0].removeprefix("callgrind.out."), "only the run's final dump is left"


def test_the_table_gives_instructions_per_task_and_against_the_100_task_row():
    rows = [
        Measured(100, 1, 1, 1, 1, 0, 0, startup_instructions=8e8, commit_instructions=7e7),
        Measured(1000, 1, 1, 1, 1, 0, 0, startup_instructions=7.2e9, commit_instructions=7.35e8),
    ]
    last = table(rows).splitlines()[-1].split("|")
    assert [cell.strip() for cell in last[2:6]] == ["7,200,000", "9.00x", "735,000", "10.50x"]
