"""kinesalite, a Kinesis API emulator from npm, for the Kinesis tests and benchmark.

    python -m tests.integration.kinesis.emulator fetch    # npm ci into the cache (make kinesalite)
    python -m tests.integration.kinesis.emulator run      # start one and print its endpoint

The npm packages of ``tools/kinesis/package-lock.json`` are installed with ``npm ci`` into
``$MILLSTREAM_KINESALITE_CACHE`` (default ``~/.cache/millstream/kinesalite``), in a directory named
after the lock file's hash, so a version change installs again and several checkouts share one copy.
The install happens in a temporary directory renamed into place: concurrent sessions never see half
of it. The server is ``tools/kinesis/server.js`` (why a wrapper: see there), bound to 127.0.0.1 on a
free port, in memory, and dies with the process that started it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from tests.integration.processes import EmulatorError, ServerProcess, cache_dir, child_setup, npm_install

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tools" / "kinesis"
LOCK = TOOLS / "package-lock.json"
READY = "kinesalite listening on "
REGION = "us-east-1"
ACCESS_KEY = "millstream-test"
SECRET_KEY = "millstream-test-secret"


def install_dir() -> Path:
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    return cache_dir("MILLSTREAM_KINESALITE_CACHE", "kinesalite") / f"lock-{digest}"


def fetch(quiet: bool = True) -> Path:
    """The directory holding ``node_modules`` with kinesalite, installed with npm first if needed."""
    target = install_dir()
    if (target / ".complete").exists():
        return target

    def prepare(staging: Path) -> None:
        shutil.copy(TOOLS / "package.json", staging / "package.json")
        shutil.copy(LOCK, staging / "package-lock.json")

    return npm_install(target, ["ci", "--omit=optional", "--ignore-scripts"], f"kinesalite ({LOCK})",
                       prepare=prepare, quiet=quiet)  # fmt: skip


class Kinesalite(ServerProcess):
    """One emulator process: ``start``, use ``endpoint``, ``stop`` (or use it as a context manager)."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.process: subprocess.Popen[str] | None = None
        self._output: list[str] = []
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> Kinesalite:
        modules = fetch() / "node_modules"
        env = {**os.environ, "NODE_PATH": str(modules)}
        self.process = subprocess.Popen(
            ["node", str(TOOLS / "server.js"), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=child_setup(),
        )
        ready = threading.Event()
        self._reader = threading.Thread(target=self._pump, args=(ready,), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EmulatorError("kinesalite did not start: " + "".join(self._output)[-2000:])
        return self

    def check(self) -> None:
        """Raise if the emulator process has exited: its exit status and the tail of its output say why.

        Without this a dead emulator shows only as "connection refused" in every test that follows."""
        if self.process is not None and self.process.poll() is not None:
            if self._reader is not None:
                self._reader.join(10)  # its last lines, up to the end of its output
            raise EmulatorError(
                f"kinesalite (pid {self.process.pid}) exited with status {self.process.returncode}; "
                "its last output:\n" + "".join(self._output)[-4000:]
            )

    def restart(self) -> Kinesalite:
        """A new emulator process (new port, no streams) in place of one that died."""
        self.stop()
        self._output = []
        return self.start()

    def _pump(self, ready: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._output.append(line)
            if line.startswith(READY):
                self.endpoint = "http://" + line[len(READY) :].strip()
                ready.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fetch", "run"])
    args = parser.parse_args()
    if args.command == "fetch":
        print(fetch(quiet=False))
        return
    with Kinesalite() as emulator:
        print(f"{emulator.endpoint} (region {REGION}); Ctrl-C stops it", flush=True)
        try:
            while emulator.process is not None and emulator.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
