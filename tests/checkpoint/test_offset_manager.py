from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.checkpoint.offset_manager import OffsetManager
from millstream.config import Config
from millstream.model import SystemStreamPartition as SSP
from millstream.model import TaskName
from millstream.systems.base import SystemStreamPartitionMetadata as Meta
from millstream.systems.startpoints import Startpoint


class IntAdmin:
    """Integer offsets, as the log and Kafka systems have."""

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
    return OffsetManager(Config(values or {}), {"log": IntAdmin()})


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


def test_resume_point_trimmed_by_retention_falls_back_to_oldest():
    assert manager().starting_offsets(TASK, {A0}, CheckpointV1({A0: "3"}), META) == {A0: "10"}


def test_partitions_are_resolved_independently():
    offsets = manager().starting_offsets(TASK, {A0, A1}, CheckpointV1({A1: "2"}), META)
    assert offsets == {A0: "20", A1: "3"}


def test_empty_partition_with_oldest_default_starts_at_upcoming():
    meta = {A0: Meta(None, None, "7")}
    values = {"systems.log.samza.offset.default": "oldest"}
    assert manager(values).starting_offsets(TASK, {A0}, None, meta) == {A0: "7"}


class ResolvingAdmin(IntAdmin):
    def resolve_startpoint(self, ssp, startpoint):
        from millstream.systems.startpoints import StartpointSpecific

        if isinstance(startpoint, StartpointSpecific):
            if startpoint.specific_offset == "boom":
                raise RuntimeError("cannot resolve")
            return startpoint.specific_offset
        return ""


def test_startpoint_beats_reset_and_checkpoint_and_is_used_inclusive():
    from millstream.systems.startpoints import StartpointSpecific

    values = {"systems.log.streams.a.samza.reset.offset": "true"}  # upcoming is the default
    om = OffsetManager(Config(values), {"log": ResolvingAdmin()})
    offsets = om.starting_offsets(TASK, {A0, A1}, CheckpointV1({A0: "15", A1: "2"}), META)
    resolution = om.apply_startpoints(TASK, offsets, {A0: StartpointSpecific("12")})
    assert resolution.offsets == {A0: "12", A1: "5"}  # A1: reset.offset ignores its checkpoint → upcoming
    assert resolution.applied == {A0: "12"}


def test_unresolvable_startpoint_falls_back_to_the_checkpoint_and_is_reported():
    from millstream.systems.startpoints import StartpointOldest, StartpointSpecific

    om = OffsetManager(Config({}), {"log": ResolvingAdmin()})
    offsets = om.starting_offsets(TASK, {A0, A1}, CheckpointV1({A0: "15", A1: "2"}), META)
    resolution = om.apply_startpoints(TASK, offsets, {A0: StartpointSpecific("boom"), A1: StartpointOldest()})
    assert resolution.offsets == {A0: "16", A1: "3"}
    assert set(resolution.failures) == {A0, A1}
    assert "cannot resolve" in resolution.failures[A0]


def test_startpoints_of_partitions_the_task_does_not_read_are_ignored():
    from millstream.systems.startpoints import StartpointSpecific

    om = OffsetManager(Config({}), {"log": ResolvingAdmin()})
    resolution = om.apply_startpoints(TASK, {A0: "20"}, {A1: StartpointSpecific("1")})
    assert resolution.offsets == {A0: "20"} and not resolution.applied and not resolution.failures
