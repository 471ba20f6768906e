import pytest

from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.checkpoint.offset_manager import OffsetManager, TrimmedOffsetError
from millstream.config.settings import Settings
from millstream.contracts.startpoints import Startpoint
from millstream.contracts.systems import SystemStreamPartitionMetadata as Meta
from millstream.model import SystemStreamPartition as SSP
from millstream.model import TaskName


class IntAdmin:
    """Integer offsets from origin 0, as the log and Kafka systems have."""

    origin_offset = "0"

    def offsets_after(self, offsets):
        return {ssp: str(int(offset) + 1) for ssp, offset in offsets.items()}

    def offset_comparator(self, a, b):
        return (int(a) > int(b)) - (int(a) < int(b))

    def resolve_startpoint(self, ssp: SSP, startpoint: Startpoint) -> str:
        raise AssertionError("only ResolvingAdmin's tests apply startpoints")


A0, A1 = SSP("log", "a", 0), SSP("log", "a", 1)
META = {A0: Meta("10", "19", "20"), A1: Meta("0", "4", "5")}
TASK = TaskName("Partition 0")


def manager(values=None):
    return OffsetManager(Settings(values or {}), {"log": IntAdmin()})


def test_checkpointed_partition_resumes_after_its_offset():
    offsets = manager().starting_offsets(TASK, {A0}, CheckpointV1({A0: "15"}), META)
    assert offsets == {A0: "16"}


def test_without_checkpoint_upcoming_is_the_default():
    assert manager().starting_offsets(TASK, {A0}, None, META) == {A0: "20"}


def test_system_offset_default_oldest_starts_at_the_oldest_retained_offset():
    values = {"systems.log.samza.offset.default": "oldest"}
    assert manager(values).starting_offsets(TASK, {A0}, None, META) == {A0: "10"}


def test_stream_level_offset_default_overrides_system_level():
    values = {
        "systems.log.samza.offset.default": "oldest",
        "systems.log.streams.a.samza.offset.default": "upcoming",
    }
    assert manager(values).starting_offsets(TASK, {A0}, None, META) == {A0: "20"}


def test_reset_offset_ignores_the_checkpoint():
    values = {"systems.log.streams.a.samza.reset.offset": "true", "systems.log.samza.offset.default": "oldest"}
    offsets = manager(values).starting_offsets(TASK, {A0}, CheckpointV1({A0: "15"}), META)
    assert offsets == {A0: "10"}


def test_a_resume_point_trimmed_by_retention_fails_naming_the_partition_and_the_lost_offsets():
    with pytest.raises(TrimmedOffsetError) as failure:
        manager().starting_offsets(TASK, {A0}, CheckpointV1({A0: "3"}), META)
    assert str(failure.value).startswith(
        "Partition 0: stream 'log.a' partition 0: resuming after its checkpoint, but offsets 4 up to 10 (exclusive) "
        "were already deleted; the oldest available offset is 10."
    )
    assert "systems.log.streams.a.samza.trimmed.offset.policy" in str(failure.value)


@pytest.mark.parametrize(
    ("key", "policy", "start"),
    [
        ("systems.log.samza.trimmed.offset.policy", "oldest", "10"),
        ("systems.log.streams.a.samza.trimmed.offset.policy", "oldest", "10"),
        ("systems.log.streams.a.samza.trimmed.offset.policy", "upcoming", "20"),
    ],
)
def test_a_trimmed_offset_policy_accepts_the_loss_and_starts_where_it_says(key, policy, start):
    offsets = manager({key: policy}).starting_offsets(TASK, {A0}, CheckpointV1({A0: "3"}), META)
    assert offsets == {A0: start}


def test_a_stream_level_fail_policy_overrides_a_lenient_system_level_one():
    values = {
        "systems.log.samza.trimmed.offset.policy": "oldest",
        "systems.log.streams.a.samza.trimmed.offset.policy": "fail",
    }
    with pytest.raises(TrimmedOffsetError):
        manager(values).starting_offsets(TASK, {A0}, CheckpointV1({A0: "3"}), META)


INTERMEDIATE = {"systems.log.streams.a.samza.intermediate": "true"}


def test_a_fresh_reader_of_an_intermediate_stream_that_lost_its_head_fails():
    with pytest.raises(
        TrimmedOffsetError, match="reading the intermediate stream from its start, but offsets 0 up to 10"
    ):
        manager(INTERMEDIATE).starting_offsets(TASK, {A0}, None, META)


def test_a_fresh_reader_of_a_complete_intermediate_stream_starts_at_its_origin():
    assert manager(INTERMEDIATE).starting_offsets(TASK, {A1}, None, META) == {A1: "0"}


def test_a_fresh_reader_of_an_intermediate_stream_emptied_by_a_purge_fails():
    with pytest.raises(TrimmedOffsetError, match="offsets 0 up to 7"):
        manager(INTERMEDIATE).starting_offsets(TASK, {A0}, None, {A0: Meta(None, None, "7")})


def test_a_checkpointed_reader_of_a_purged_intermediate_stream_resumes_after_its_checkpoint():
    assert manager(INTERMEDIATE).starting_offsets(TASK, {A0}, CheckpointV1({A0: "9"}), META) == {A0: "10"}


def test_partitions_are_resolved_independently():
    offsets = manager().starting_offsets(TASK, {A0, A1}, CheckpointV1({A1: "2"}), META)
    assert offsets == {A0: "20", A1: "3"}


def test_empty_partition_with_oldest_default_starts_at_upcoming():
    meta = {A0: Meta(None, None, "7")}
    values = {"systems.log.samza.offset.default": "oldest"}
    assert manager(values).starting_offsets(TASK, {A0}, None, meta) == {A0: "7"}


class ResolvingAdmin(IntAdmin):
    def resolve_startpoint(self, ssp, startpoint):
        from millstream.contracts.startpoints import StartpointSpecific

        if isinstance(startpoint, StartpointSpecific):
            if startpoint.specific_offset == "boom":
                raise RuntimeError("cannot resolve")
            return startpoint.specific_offset
        return ""


def test_startpoint_beats_reset_and_checkpoint_and_is_used_inclusive():
    from millstream.contracts.startpoints import StartpointSpecific

    values = {"systems.log.streams.a.samza.reset.offset": "true"}  # upcoming is the default
    om = OffsetManager(Settings(values), {"log": ResolvingAdmin()})
    offsets = om.starting_offsets(TASK, {A0, A1}, CheckpointV1({A0: "15", A1: "2"}), META)
    resolution = om.apply_startpoints(TASK, offsets, {A0: StartpointSpecific("12")})
    assert resolution.offsets == {A0: "12", A1: "5"}  # A1: reset.offset ignores its checkpoint → upcoming
    assert resolution.applied == {A0: "12"}


def test_unresolvable_startpoint_falls_back_to_the_checkpoint_and_is_reported():
    from millstream.contracts.startpoints import StartpointOldest, StartpointSpecific

    om = OffsetManager(Settings({}), {"log": ResolvingAdmin()})
    offsets = om.starting_offsets(TASK, {A0, A1}, CheckpointV1({A0: "15", A1: "2"}), META)
    resolution = om.apply_startpoints(TASK, offsets, {A0: StartpointSpecific("boom"), A1: StartpointOldest()})
    assert resolution.offsets == {A0: "16", A1: "3"}
    assert set(resolution.failures) == {A0, A1}
    assert "cannot resolve" in resolution.failures[A0]


def test_startpoints_of_partitions_the_task_does_not_read_are_ignored():
    from millstream.contracts.startpoints import StartpointSpecific

    om = OffsetManager(Settings({}), {"log": ResolvingAdmin()})
    resolution = om.apply_startpoints(TASK, {A0: "20"}, {A1: StartpointSpecific("1")})
    assert resolution.offsets == {A0: "20"} and not resolution.applied and not resolution.failures
