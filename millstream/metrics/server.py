"""The driver's HTTP endpoint (``metrics.prometheus.port``): ``/metrics``, ``/status.json`` and ``/``.

One port for the whole job, on the driver: containers run in Spark workers nobody can address, so
they ship snapshots through the metadata store and this server reads them when scraped. The status
document comes from a callable the runner passes in (the coordinator builds it), which keeps this
package below the coordinator. Requests are served one at a time: a scrape is cheap, and the store
connection is not shared across threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import orjson

from millstream.config.secrets import mask_secrets
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.contracts.metrics_snapshot import ContainerSnapshot, current_snapshots
from millstream.errors import ConfigError
from millstream.metrics.page import STATUS_PAGE
from millstream.metrics.prometheus import CONTENT_TYPE, exposition

log = logging.getLogger(__name__)

StatusSource = Callable[[], dict[str, Any]]
StoreSource = Callable[[], MetadataStore]
"""The calling thread's metadata-store connection, owned by the caller (``DriverServices.store``)."""


def live_snapshots(store: MetadataStore) -> list[ContainerSnapshot]:
    """The current generation's snapshots, without those of a container attempt a newer one fenced off."""
    generation = coordination.current_generation(store)
    return [
        snapshot
        for snapshot in current_snapshots(store, generation)
        if snapshot.attempt >= coordination.container_epoch(store, snapshot.container_id)
    ]


class MetricsServer:
    """Serves the job's metrics and status until :meth:`stop`; a context manager.

    It reads the metadata store through ``store``, called on its request thread (the driver's services give that
    thread a connection of its own). Status and store both come in as callables, so the metrics package never
    imports the coordinator."""

    def __init__(self, config: Settings, status: StatusSource, store: StoreSource, port: int | None = None) -> None:
        settings = config.view(MetricsConfig)
        self.config = config
        self.job = config.job.name
        self.status = status
        address = (settings.prometheus_host, settings.prometheus_port if port is None else port)
        try:
            self._http = HTTPServer(address, _Handler)
        except OSError as error:
            raise ConfigError(
                f"config key 'metrics.prometheus.port': cannot serve metrics on {address[0]}:{address[1]}: {error}"
            ) from None
        self._store = store
        self._lock = threading.Lock()
        self._http.metrics_server = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._http.serve_forever, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("serving metrics on http://%s:%d/metrics and the job status on /", *self._http.server_address[:2])
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def metrics(self) -> bytes:
        with self._lock:
            snapshots = live_snapshots(self._store())
        return mask_secrets(exposition(snapshots, self.job).decode(), self.config).encode()

    def status_json(self) -> bytes:
        return mask_secrets(orjson.dumps(self.status(), option=orjson.OPT_INDENT_2).decode(), self.config).encode()


class _Handler(BaseHTTPRequestHandler):
    server: HTTPServer

    def do_GET(self) -> None:
        owner: MetricsServer = self.server.metrics_server  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._reply(200, CONTENT_TYPE, owner.metrics())
            elif path == "/status.json":
                self._reply(200, "application/json", owner.status_json())
            elif path in ("/", "/index.html"):
                self._reply(200, "text/html; charset=utf-8", STATUS_PAGE.encode())
            else:
                self._reply(404, "text/plain; charset=utf-8", b"not found: /metrics, /status.json or /\n")
        except Exception as error:  # a store or system hiccup: the next scrape tries again
            log.warning("metrics endpoint %s failed: %s: %s", path, type(error).__name__, error)
            message = mask_secrets(f"{type(error).__name__}: {error}\n", owner.config)
            self._reply(500, "text/plain; charset=utf-8", message.encode())

    def _reply(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics endpoint: " + format, *args)


@contextmanager
def metrics_endpoint(config: Settings, status: StatusSource, store: StoreSource) -> Iterator[MetricsServer | None]:
    """The server, started, while the job runs when ``metrics.prometheus.port`` is set; else None. It reads
    the metadata store through ``store`` (see :class:`MetricsServer`)."""
    if config.view(MetricsConfig).prometheus_port == 0:
        yield None
        return
    with MetricsServer(config, status, store) as server:
        yield server
