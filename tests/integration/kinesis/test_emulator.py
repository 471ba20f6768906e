"""The kinesalite harness itself: an emulator that dies is reported, not left to look like a refused connection."""

from __future__ import annotations

import signal
import socket
import struct
from urllib.parse import urlsplit

import pytest

from tests.integration.kinesis.emulator import Kinesalite
from tests.integration.kinesis.helpers import raw_client
from tests.integration.processes import EmulatorError


def test_a_dead_emulator_is_reported_with_its_exit_status_and_output_and_a_restart_serves_again() -> None:
    with Kinesalite() as emulator:
        emulator.check()
        assert emulator.process is not None
        emulator.process.send_signal(signal.SIGTERM)
        emulator.process.wait(30)
        with pytest.raises(EmulatorError, match=r"exited with status 0(.|\n)*SIGTERM received"):
            emulator.check()
        emulator.restart()
        emulator.check()
        assert raw_client(emulator.endpoint).list_streams()["StreamNames"] == []


def test_a_client_killed_in_the_middle_of_a_request_leaves_the_emulator_serving_the_others() -> None:
    """A container killed while sending a request must not take the emulator down with it.

    kinesalite throws on a request aborted before its body ended, which killed the process the other
    containers of a test were reading from; real Kinesis drops such a request and serves on.
    """
    with Kinesalite() as emulator:
        address = urlsplit(emulator.endpoint)
        with socket.create_connection((address.hostname, address.port)) as client:
            client.sendall(b'POST / HTTP/1.1\r\nHost: kinesis\r\nContent-Length: 1000\r\n\r\n{"Stream')
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert raw_client(emulator.endpoint).list_streams()["StreamNames"] == []
        emulator.check()
