"""``benchmarks.soak`` measures a broker restart's stall from checkpoints read after the broker stopped."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from benchmarks.soak import BrokerRestart, CheckpointWatch, KeptBroker, Settings, soak_config


class StoppedBroker:
    def __init__(self, stopped_at: float | None) -> None:
        self.stopped_at = stopped_at

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        raise AssertionError("the stall is computed from what the watch saw, without restarting anything")


def restart_seen(
    tmp_path: Path, stopped_at: float | None, up_at: float, advanced: list[float | tuple[float, float]]
) -> BrokerRestart:
    """A restart whose watch saw the checkpoints move at ``advanced``: an instant read, or a read's start and end."""
    watch = CheckpointWatch(soak_config(tmp_path, "changelog", Settings(kills=0), None))
    watch.advanced = [moment if isinstance(moment, tuple) else (moment, moment) for moment in advanced]
    restart = BrokerRestart(StoppedBroker(stopped_at), watch, total=100)
    restart.up_at = up_at
    return restart


def test_a_checkpoint_written_before_the_restarted_broker_passed_its_readiness_check_is_a_stall_of_zero(tmp_path):
    """Clients reach the broker before ``restart`` returns; the CI once saw every checkpoint land in that gap."""
    assert restart_seen(tmp_path, stopped_at=10.0, up_at=20.0, advanced=[5.0, 18.0, 25.0]).stall() == 0.0


def test_the_stall_runs_from_the_broker_being_up_to_the_first_checkpoint_read_after_it_stopped(tmp_path):
    assert restart_seen(tmp_path, stopped_at=10.0, up_at=20.0, advanced=[5.0, 9.9, 23.5, 30.0]).stall() == 3.5


def test_no_checkpoint_read_after_the_broker_stopped_is_no_stall_figure_rather_than_one_from_before(tmp_path):
    assert restart_seen(tmp_path, stopped_at=10.0, up_at=20.0, advanced=[5.0, 9.9]).stall() is None
    assert restart_seen(tmp_path, stopped_at=None, up_at=20.0, advanced=[5.0, 25.0]).stall() is None


def test_a_read_that_spanned_the_outage_dates_the_checkpoints_it_saw_by_its_end(tmp_path):
    """The CI once saw one read retry through the whole outage and find every later checkpoint: the job had ended
    meanwhile, so no read that began after the stop saw anything new."""
    assert restart_seen(tmp_path, stopped_at=10.0, up_at=20.0, advanced=[5.0, (9.5, 24.0)]).stall() == 4.0
    assert restart_seen(tmp_path, stopped_at=10.0, up_at=20.0, advanced=[5.0, (9.5, 9.8)]).stall() is None


class RecordingBroker:
    """Notes which thread restarted it; fails its second restart."""

    def __init__(self) -> None:
        self.stopped_at: float | None = None
        self.threads: list[threading.Thread] = []

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        self.threads.append(threading.current_thread())
        if len(self.threads) == 2:
            raise RuntimeError("the broker did not start")
        self.stopped_at = 1.0


def test_a_kept_broker_restarts_on_its_own_thread_so_the_broker_outlives_the_run_that_asked():
    """A broker's process dies with the thread that started it: restarted by a run's thread, the next run of
    ``--runs`` found no broker."""
    broker = RecordingBroker()
    kept = KeptBroker(broker)
    kept.start()
    asker = threading.Thread(target=kept.restart)
    asker.start()
    asker.join()
    assert broker.threads == [kept] and kept.stopped_at == 1.0
    with pytest.raises(RuntimeError, match="did not start"):
        kept.restart()
