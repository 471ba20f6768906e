"""Which envelopes a restored task skips: those up to the offsets its state reflects, per partition."""

from __future__ import annotations

from millstream.control.replay import ReplayFilter, compare_numeric
from millstream.model import SystemStreamPartition

P0 = SystemStreamPartition("log", "in", 0)
P1 = SystemStreamPartition("log", "in", 1)


def restored(document: dict[str, str], keep: frozenset[SystemStreamPartition] = frozenset({P0, P1})) -> ReplayFilter:
    replay = ReplayFilter()
    replay.restore(document, keep)
    return replay


def test_every_accepted_envelope_moves_its_partitions_offset():
    replay = ReplayFilter()
    assert replay.accept(P0, "0") and replay.accept(P0, "1") and replay.accept(P1, "7")
    assert replay.snapshot() == {P0.key(): "1", P1.key(): "7"}


def test_after_a_restore_envelopes_up_to_the_stored_offset_are_skipped_until_a_later_one_arrives():
    replay = restored({P0.key(): "5"})
    assert [replay.accept(P0, offset) for offset in ("4", "5", "6", "3")] == [False, False, True, True]
    assert replay.offsets[P0] == "3", "skipping ended with the first later envelope"
    assert replay.accept(P1, "0"), "a partition without a stored offset is never skipped"


def test_partitions_not_kept_are_neither_restored_nor_skipped():
    replay = restored({P0.key(): "5", P1.key(): "5"}, keep=frozenset({P0}))
    assert replay.offsets == {P0: "5"}
    assert replay.accept(P1, "1")


def test_the_systems_offset_order_is_used_and_incomparable_offsets_are_not_skipped():
    replay = restored({P0.key(): "b", P1.key(): "x"})
    replay.comparators = {"log": lambda a, b: (a > b) - (a < b) if a != "x" and b != "x" else None}
    assert not replay.accept(P0, "a")
    assert replay.accept(P1, "w"), "neither the system nor numbers order them: re-applied, as in Samza"


def test_numeric_offsets_compare_as_numbers():
    assert compare_numeric("9", "10") == -1 and compare_numeric("10", "10") == 0
    assert compare_numeric("a", "1") is None
