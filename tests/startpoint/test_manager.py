import pytest

from millstream.contracts.startpoints import StartpointOldest, StartpointSpecific, StartpointUpcoming, now_ms
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.model import SystemStreamPartition as SSP
from millstream.model import TaskName
from millstream.startpoint.errors import StartpointManagerStoppedError
from millstream.startpoint.manager import READ_WRITE_NAMESPACE, StartpointManager, parse_read_write_key

P0, P1 = SSP("log", "in", 0), SSP("log", "in", 1)
T0, T1 = TaskName("Partition 0"), TaskName("Partition 1")


@pytest.fixture
def manager(tmp_path):
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    store.init()
    return StartpointManager(store)


def test_both_key_kinds_are_written_read_and_deleted_independently(manager):
    manager.write_startpoint(P0, StartpointSpecific("5"))
    manager.write_startpoint(P0, StartpointOldest(), T0)
    assert manager.read_startpoint(P0) == StartpointSpecific(
        "5", creation_timestamp=manager.read_startpoint(P0).creation_timestamp
    )
    assert isinstance(manager.read_startpoint(P0, T0), StartpointOldest)
    manager.delete_startpoint(P0)
    assert manager.read_startpoint(P0) is None
    assert manager.read_startpoint(P0, T0) is not None


def test_keys_follow_samzas_format_and_parse_back_with_dotted_streams_and_spaced_tasks(manager):
    ssp = SSP("kafka", "page.views", 2)
    manager.write_startpoint(ssp, StartpointUpcoming(), "Partition 2")
    assert list(manager.store.all(READ_WRITE_NAMESPACE)) == ["kafka.page.views.2.Partition 2"]
    assert parse_read_write_key("kafka.page.views.2.Partition 2") == (ssp, "Partition 2")
    assert parse_read_write_key("kafka.page.views.2") == (ssp, None)


def test_stale_startpoints_are_ignored_but_kept_and_listed_as_stale(manager):
    old = StartpointSpecific("1", creation_timestamp=now_ms() - 13 * 3600 * 1000)
    manager.write_startpoint(P0, old)
    assert manager.read_startpoint(P0) is None
    (entry,) = manager.list_startpoints()
    assert entry.stale and entry.startpoint == old


def test_max_age_is_configurable(tmp_path):
    store = SqliteMetadataStore(tmp_path / "m.db")
    manager = StartpointManager(store, max_age_ms=10)
    manager.write_startpoint(P0, StartpointSpecific("1", creation_timestamp=now_ms() - 1000))
    assert manager.read_startpoint(P0) is None


def test_fan_out_gives_an_ssp_startpoint_to_every_task_owning_the_ssp_and_deletes_the_key(manager):
    broadcast = SSP("log", "side", 0)
    manager.write_startpoint(broadcast, StartpointOldest())
    fanned = manager.fan_out({T0: {P0, broadcast}, T1: {P1, broadcast}})
    assert set(fanned) == {T0, T1}
    assert all(isinstance(f[broadcast], StartpointOldest) for f in fanned.values())
    assert manager.read_startpoint(broadcast) is None
    assert manager.get_fan_out_for_task(T1) == fanned[T1]


def test_newer_startpoint_wins_and_a_tie_goes_to_the_task_key(manager):
    now = now_ms()
    manager.write_startpoint(P0, StartpointSpecific("ssp-newer", creation_timestamp=now))
    manager.write_startpoint(P0, StartpointSpecific("task-older", creation_timestamp=now - 10), T0)
    manager.write_startpoint(P1, StartpointSpecific("ssp-tie", creation_timestamp=now))
    manager.write_startpoint(P1, StartpointSpecific("task-tie", creation_timestamp=now), T1)
    fanned = manager.fan_out({T0: {P0}, T1: {P1}})
    assert fanned[T0][P0].specific_offset == "ssp-newer"
    assert fanned[T1][P1].specific_offset == "task-tie"
    assert manager.list_startpoints() == []


def test_startpoints_of_partitions_no_task_owns_stay_pending(manager):
    elsewhere = SSP("log", "other", 0)
    manager.write_startpoint(elsewhere, StartpointOldest())
    manager.fan_out({T0: {P0}})
    assert [entry.ssp for entry in manager.list_startpoints()] == [elsewhere]
    assert manager.all_fan_outs() == {}


def test_a_newer_fan_out_replaces_an_unapplied_one_and_keeps_the_others(manager):
    manager.write_startpoint(P0, StartpointSpecific("1", creation_timestamp=1000 + now_ms() - 1000))
    manager.write_startpoint(SSP("log", "b", 0), StartpointOldest())
    manager.fan_out({T0: {P0, SSP("log", "b", 0)}})
    manager.write_startpoint(P0, StartpointSpecific("2"))
    manager.fan_out({T0: {P0, SSP("log", "b", 0)}})
    fan_out = manager.get_fan_out_for_task(T0)
    assert fan_out[P0].specific_offset == "2" and isinstance(fan_out[SSP("log", "b", 0)], StartpointOldest)


def test_removing_some_ssps_of_a_fan_out_keeps_the_rest_and_the_last_removal_deletes_it(manager):
    manager.write_startpoint(P0, StartpointOldest(), T0)
    manager.write_startpoint(P1, StartpointOldest(), T0)
    manager.fan_out({T0: {P0, P1}})
    manager.remove_fan_out_for_task_ssps(T0, {P0})
    assert set(manager.get_fan_out_for_task(T0)) == {P1}
    manager.remove_fan_out_for_task_ssps(T0, {P1})
    assert manager.all_fan_outs() == {}


def test_remove_all_fan_outs_keeps_the_read_write_namespace(manager):
    manager.write_startpoint(P0, StartpointOldest(), T0)
    manager.fan_out({T0: {P0}})
    manager.write_startpoint(P1, StartpointOldest())
    manager.remove_all_fan_outs()
    assert manager.all_fan_outs() == {} and len(manager.list_startpoints()) == 1


def test_every_operation_after_stop_raises(manager):
    manager.stop()
    manager.stop()
    for operation in (
        lambda: manager.write_startpoint(P0, StartpointOldest()),
        lambda: manager.read_startpoint(P0),
        lambda: manager.delete_startpoint(P0),
        lambda: manager.fan_out({T0: {P0}}),
        lambda: manager.get_fan_out_for_task(T0),
        lambda: manager.remove_fan_out_for_task_ssps(T0, {P0}),
    ):
        with pytest.raises(StartpointManagerStoppedError):
            operation()


def test_fan_outs_for_tasks_gives_each_named_task_its_fan_out_and_an_empty_one_to_the_others(manager):
    manager.write_startpoint(P0, StartpointOldest())
    manager.write_startpoint(P1, StartpointUpcoming())
    manager.fan_out({T0: {P0}, T1: {P1}})
    other = TaskName("Partition 2")

    fan_outs = manager.fan_outs_for_tasks([T0, other])

    assert fan_outs == {str(T0): manager.get_fan_out_for_task(T0), str(other): {}}
    assert isinstance(fan_outs[str(T0)][P0], StartpointOldest)
