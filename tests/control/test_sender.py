"""Where producing tasks send control messages: every partition, or Samza's aggregate partition."""

import zlib

from millstream.control.sender import aggregate_partition, control_targets, rebroadcast_targets


def test_broadcast_sends_to_every_partition():
    assert control_targets("app-1-by-user", 4, aggregate=False) == [0, 1, 2, 3]


def test_aggregate_mode_sends_to_one_partition_chosen_by_the_stream_name():
    (target,) = control_targets("app-1-by-user", 4, aggregate=True)
    assert target == aggregate_partition("app-1-by-user", 4)
    assert {aggregate_partition(f"app-1-s{i}", 4) for i in range(40)} == {0, 1, 2, 3}


def test_aggregate_partition_is_stable_across_calls_and_processes():
    assert aggregate_partition("app-1-by-user", 8) == zlib.crc32(b"app-1-by-user") % 8


def test_the_aggregating_task_rebroadcasts_to_every_other_partition():
    own = aggregate_partition("s", 4)
    others = rebroadcast_targets("s", 4)
    assert len(others) == 3 and own not in others
    assert rebroadcast_targets("s", 1) == []
