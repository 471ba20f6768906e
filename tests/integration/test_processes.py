"""Server children: one started after gRPC's threads run in the test process (a Spark Connect test ran) is forked
with only the forking thread, so closing its inherited descriptors before its exec cannot pull gRPC's epoll
descriptor from under a gRPC thread and abort it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from tests.integration.processes import child_setup


def test_a_server_child_forked_while_grpc_threads_run_has_only_the_forking_thread_before_its_exec(
    tmp_path: Path,
) -> None:
    setup = child_setup()
    if not sys.platform.startswith("linux"):
        assert setup is None, "off Linux a child is spawned without a preexec_fn, so no fork handler runs in it"
        return
    assert setup is not None
    channel = grpc.insecure_channel("127.0.0.1:1")  # nothing listens: connecting starts gRPC's threads
    with pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=0.3)
    threads = tmp_path / "threads"

    def count_threads() -> None:
        setup()
        threads.write_text(str(len(os.listdir("/proc/self/task"))))

    try:
        subprocess.run(["true"], preexec_fn=count_threads, check=True)
    finally:
        channel.close()
    assert threads.read_text() == "1"
