"""The kinesalite harness itself: an emulator that dies is reported, not left to look like a refused connection."""

from __future__ import annotations

import signal

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
