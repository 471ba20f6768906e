"""Instructions executed by every thread of the process, counted by valgrind's callgrind: a measure of work that
counts native code (RocksDB, SQLite, the interpreter, the C library) and that neither a busy machine nor the
processor's caches move.

CPU seconds count what the work cost on this machine: a call whose data fell out of the caches costs more than the
same call whose data stayed in them, so a phase over 1,000 tasks can cost more than ten times the same phase over
100 while doing ten times the work. Python call counts (``benchmarks.call_count``) separate the two for Python code
only. Instructions separate them for all of it: the same instructions cost the same count however long they waited
for memory. Run the measuring program under callgrind with instrumentation off until a window asks for it::

    valgrind --tool=callgrind --instr-atstart=no python -m benchmarks.commit_scale --instructions ...

``InstructionCounter.window(label)`` turns instrumentation on for the ``with`` block, then has callgrind dump the
block's counts (``CALLGRIND_DUMP_STATS_AT``, which also zeroes them) and reads the instructions from the dump, which
it deletes. Callgrind runs the process's threads one at a time, so a window counts every thread's work in it. The
client requests are C macros (``valgrind/callgrind.h``): a two-function helper library is compiled with the
machine's C compiler at first use and called through ``ctypes``. Outside callgrind the counter refuses to start.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_HELPER = r"""
#include <valgrind/callgrind.h>
int millstream_under_valgrind(void) { return RUNNING_ON_VALGRIND; }
void millstream_window_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void millstream_window_end(const char *label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""

RUN_UNDER = "valgrind --tool=callgrind --instr-atstart=no python -m ..."
"""How to run a program that counts instructions."""


class InstructionCountError(RuntimeError):
    """The counter cannot count here: no compiler or header for its helper, not under callgrind, or no dump."""


@dataclass
class Window:
    """One counted block; ``instructions`` is set when the block ends."""

    label: str
    instructions: int = 0


def build_helper(directory: Path) -> ctypes.CDLL:
    """Compile the client-request helper into ``directory`` and load it."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise InstructionCountError("counting instructions needs a C compiler (cc or gcc) to build its helper")
    source, library = directory / "callgrind_client.c", directory / "callgrind_client.so"
    source.write_text(_HELPER)
    built = subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True, text=True
    )
    if built.returncode != 0:
        raise InstructionCountError(
            f"cannot build the callgrind helper (is valgrind's valgrind/callgrind.h installed?): {built.stderr.strip()}"
        )
    return ctypes.CDLL(str(library))


def dumped_instructions(path: Path) -> int:
    """The instructions a callgrind dump counted (its ``totals:`` line, or ``summary:`` in older formats)."""
    found: int | None = None
    with path.open() as dump:
        for line in dump:
            if line.startswith(("totals:", "summary:")):
                found = int(line.split()[1])
    if found is None:
        raise InstructionCountError(f"the callgrind dump '{path}' holds no totals")
    return found


class InstructionCounter:
    """Counts the instructions of ``with counter.window(label)`` blocks; only under callgrind (see the module)."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="millstream-callgrind-"))
        self._helper = build_helper(self._directory)
        self._helper.millstream_window_end.argtypes = [ctypes.c_char_p]
        if not self._helper.millstream_under_valgrind():
            shutil.rmtree(self._directory, ignore_errors=True)
            raise InstructionCountError(f"counting instructions needs the program run under callgrind: {RUN_UNDER}")
        self._dumps = Path.cwd()
        self._count = 0

    @contextmanager
    def window(self, label: str) -> Iterator[Window]:
        """Count the block's instructions, every thread's, into the ``Window`` it yields."""
        self._count += 1
        window = Window(f"millstream-{os.getpid()}-{self._count}-{label}")
        self._helper.millstream_window_start()
        try:
            yield window
        finally:
            self._helper.millstream_window_end(window.label.encode())
        window.instructions = self._read(window.label)

    def _read(self, label: str) -> int:
        """The dump callgrind wrote for ``label`` (``callgrind.out.<pid>.<n>`` in the working directory)."""
        marker = f"desc: Trigger: Client Request: {label}"
        for path in sorted(self._dumps.glob(f"callgrind.out.{os.getpid()}.*")):
            with path.open() as dump:
                head = [next(dump, "") for _ in range(20)]
            if any(line.strip() == marker for line in head):
                try:
                    return dumped_instructions(path)
                finally:
                    path.unlink()
        raise InstructionCountError(
            f"callgrind wrote no dump for '{label}' in {self._dumps} (run it from there without --callgrind-out-file)"
        )

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)
