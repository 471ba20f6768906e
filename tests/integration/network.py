"""A TCP proxy on loopback that can black-hole traffic, for fault tests against real servers.

A black hole here is what a network partition looks like to both ends: connections stay open, nothing
arrives, and nobody is told. Bytes read while the proxy is black-holed are held, not dropped, and
delivered when it heals, as TCP's retransmissions would deliver them after a short cut; a connection
opened during the cut reaches the server only once it heals. So a client sees exactly its own request
timeouts and nothing else, with no reset and no protocol corruption.

Traffic goes to loopback only: the proxy listens on 127.0.0.1 and forwards to a server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from types import TracebackType

from tests.integration.processes import free_port


class BlackHoleProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port``; :meth:`black_hole` stops traffic both ways."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port if port is not None else free_port()
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._server: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BlackHoleProxy:
        server = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self._server = server
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()
        return self

    def black_hole(self) -> None:
        """From now on nothing is forwarded in either direction until :meth:`heal`."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again, first what was held during the black hole."""
        self._open.set()

    @contextlib.contextmanager
    def cut(self) -> Iterator[None]:
        """Black-holed inside the block, healed after it, whatever the block raised."""
        self.black_hole()
        try:
            yield
        finally:
            self.heal()

    def stop(self) -> None:
        self._closed.set()
        self._open.set()
        if self._server is not None:
            self._server.close()
        with self._lock:
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._open.wait()
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets.update((client, upstream))
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, destination: socket.socket) -> None:
        try:
            while True:
                self._open.wait()
                data = source.recv(65536)
                if not data:
                    break
                self._open.wait()  # read during a cut: held until it heals
                destination.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, destination):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._sockets.discard(source)

    def __enter__(self) -> BlackHoleProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
