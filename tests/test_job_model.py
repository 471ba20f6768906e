from hypothesis import given
from hypothesis import strategies as st

from millstream.coordinator.groupers import GroupByPartition, group_containers, group_tasks
from millstream.job_model import JobModel
from millstream.model import SystemStreamPartition as SSP

streams = st.sampled_from(["a", "b.with.dots", "c-d"])


@given(
    partitions=st.sets(st.tuples(streams, st.integers(0, 20)), min_size=1, max_size=30),
    generation=st.integers(1, 10_000),
    containers=st.integers(1, 4),
)
def test_job_model_survives_serialization(partitions, generation, containers):
    ssps = {SSP("log", stream, p) for stream, p in partitions}
    tasks = group_tasks(GroupByPartition(), ssps, set())
    count = min(containers, len(tasks))
    model = JobModel(generation, group_containers(tasks, count))
    again = JobModel.from_bytes(model.to_bytes())
    assert again == model
    assert again.task_to_ssps() == tasks


def test_container_of_finds_the_hosting_container():
    tasks = group_tasks(GroupByPartition(), {SSP("log", "a", p) for p in range(4)}, set())
    model = JobModel(1, group_containers(tasks, 2))
    assert model.container_of(next(iter(model.containers["1"].tasks))) == "1"
