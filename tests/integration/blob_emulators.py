"""Blob store emulators for the integration tests and benchmarks, started on 127.0.0.1 by the harness:

* moto's S3 server (``moto[server]`` from PyPI, installed into the venv by the ``test`` extra);
* Azurite's blob service (npm package ``azurite``, installed with npm into a cache directory).

    python -m tests.integration.blob_emulators fetch    # install Azurite (make blob-emulators)
    python -m tests.integration.blob_emulators run      # start both and print their endpoints

Azurite goes to ``$MILLSTREAM_AZURITE_CACHE`` (default ``~/.cache/millstream/azurite``), in a directory
named after its version; the install happens in a temporary directory renamed into place, so
concurrent test sessions never see a half-installed copy. Both servers die with the process that
started them (Linux), so a killed test run leaves none behind.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.integration.processes import EmulatorError, ServerProcess, cache_dir, child_setup, free_port, npm_install

AZURITE_VERSION = "3.35.0"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's well-known development account (public, documented by Microsoft)."""


def _wait_for_port(port: int, process: subprocess.Popen[bytes], name: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmulatorError(f"{name} exited with code {process.returncode}; its log: {log}\n{_tail(log)}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise EmulatorError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f}s; its log: {log}")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class _Server(ServerProcess):
    name = "server"

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> _Server:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = self.work_dir / f"{self.name}.log"
        with open(log, "ab") as output:
            self.process = subprocess.Popen(
                self._command(),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                preexec_fn=child_setup(),
            )
        _wait_for_port(self.port, self.process, self.name, log, timeout)
        return self


class MotoS3Server(_Server):
    """moto's server mode: the S3 API (and others) on one port, state in memory."""

    name = "moto"

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def start(self, timeout: float = 60.0) -> MotoS3Server:
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while True:  # the port opens a little before the app answers
            try:
                urllib.request.urlopen(self.endpoint_url + "/", timeout=2).close()
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise EmulatorError(f"moto did not answer on {self.endpoint_url}") from None
                time.sleep(0.1)


def azurite_dir() -> Path:
    return cache_dir("MILLSTREAM_AZURITE_CACHE", "azurite") / AZURITE_VERSION


def azurite_main() -> Path:
    return azurite_dir() / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"


def fetch_azurite() -> Path:
    """Install Azurite with npm into the cache (once per version); returns the install directory."""
    if azurite_main().is_file():
        return azurite_dir()
    npm_args = ["install", "--loglevel=error", "--prefix", ".", f"azurite@{AZURITE_VERSION}"]
    return npm_install(azurite_dir(), npm_args, f"azurite@{AZURITE_VERSION}")


class AzuriteBlobServer(_Server):
    """Azurite's blob service only, data in ``work_dir``."""

    name = "azurite"

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def _command(self) -> list[str]:
        node = shutil.which("node")
        if node is None:
            raise EmulatorError("node is not on PATH: Azurite needs Node.js")
        return [
            node, str(azurite_main()), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            "--location", str(self.work_dir / "data"), "--skipApiVersionCheck", "--loose", "--silent",
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> AzuriteBlobServer:
        fetch_azurite()
        super().start(timeout)
        return self


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["fetch", "run"])
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(f"azurite {AZURITE_VERSION} in {fetch_azurite()}")
        return 0
    with (
        tempfile.TemporaryDirectory(prefix="blob-emulators-") as work,
        MotoS3Server(Path(work) / "moto") as moto,
        AzuriteBlobServer(Path(work) / "azurite") as azurite,
    ):
        assert isinstance(moto, MotoS3Server) and isinstance(azurite, AzuriteBlobServer)
        print(f"S3 (moto):  {moto.endpoint_url}")
        print(f"Azurite:    {azurite.connection_string}")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
