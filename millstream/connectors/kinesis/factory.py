"""Builds a Kinesis system's admin, consumers and producers, and refuses the jobs it cannot run.

``systems.<s>.samza.factory=kinesis`` (or Samza's ``org.apache.samza.system.kinesis.KinesisSystemFactory``).
Unlike Samza's, this factory has a producer, and the consumer needs no KCL: leases and per-shard
checkpoints live in the job's metadata store, or in a DynamoDB table (``consumer.lease.store``).
"""

from __future__ import annotations

from typing import ClassVar

from millstream.checkpoint.factory import checkpoint_manager
from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import system_names
from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.config import KINESIS_FACTORY_NAMES, KinesisClients, KinesisSystemConfig, config_keys
from millstream.connectors.kinesis.consumer import KinesisSystemConsumer, committed_offsets_from
from millstream.connectors.kinesis.dynamodb import DynamoDBLeaseStore
from millstream.connectors.kinesis.errors import KinesisConfigError
from millstream.connectors.kinesis.producer import KinesisSystemProducer
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import SystemFactory


class KinesisSystemFactory(SystemFactory):
    """The Kinesis system: admin, consumer and producer from ``systems.<s>.*`` (see ``config``)."""

    config_keys: ClassVar[frozenset[str] | None] = config_keys()

    def get_admin(self, system_name: str, config: Settings) -> KinesisSystemAdmin:
        clients = KinesisClients(config, system_name)
        return KinesisSystemAdmin(system_name, clients, container_count=config.job.container_count)

    def get_consumer(self, system_name: str, config: Settings) -> KinesisSystemConsumer:
        settings = config.view(KinesisSystemConfig, system_name)
        clients = KinesisClients(config, system_name)
        admin = KinesisSystemAdmin(system_name, clients, container_count=config.job.container_count)
        store = self.context.open_metadata_store()  # the consumer's own: its shard readers use it
        leases: MetadataStore = store
        if settings.lease_store == "dynamodb":
            leases = DynamoDBLeaseStore(
                system_name,
                lambda: clients.dynamodb,
                settings.lease_table_name(config),
                create_table=settings.dynamodb_create_table,
                metrics=admin.metrics,
            )
        return KinesisSystemConsumer(
            system_name,
            settings,
            clients,
            admin,
            leases,
            committed_offsets_from(checkpoint_manager(config, store)),
            application=settings.application(config),
            initial_positions=lambda stream: settings.initial_shard_position(config, system_name, stream),
            buffer_size=settings.buffer_size(config),
        )

    def get_producer(self, system_name: str, config: Settings) -> KinesisSystemProducer:
        clients = KinesisClients(config, system_name)
        return KinesisSystemProducer(system_name, clients.settings, clients)

    def validate_job(self, system_name: str, config: Settings) -> None:
        """Refuse what the proposal's consumer cannot support, naming the config key at fault.

        * **Stateful stores** (any ``stores.*`` key): a shard moves between tasks at run time, so a
          task's local state would not follow its keys.
        * **Broadcast inputs**: a slot is not a partition every task could read.
        * **Bootstrap streams**: a Kinesis stream has no end to bootstrap to, and its shards change.
        * **Other systems' inputs in the same job**: Kinesis slots are sized per container, which
          makes no sense for fixed partitions grouped with them.
        """
        task = config.task
        inputs = task.input_streams()
        kinesis = set(kinesis_system_names(config)) | {system_name}
        mine = [stream for stream in inputs if stream.system == system_name]
        for stream in inputs:
            if stream.system not in kinesis:
                raise KinesisConfigError(
                    f"config key 'task.inputs': Kinesis input '{mine[0] if mine else system_name}' cannot be mixed "
                    f"with inputs of other systems ('{stream}') in one job; split it into two jobs"
                )
        for ssp in sorted(task.broadcast_ssps()):
            if ssp.system in kinesis:
                raise KinesisConfigError(
                    f"config key 'task.broadcast.inputs': Kinesis stream '{ssp.system}.{ssp.stream}' cannot be a "
                    "broadcast input (its partitions are slots that shards move between at run time)"
                )
        for key, value in sorted(config.items()):
            bootstrap = key.startswith(f"systems.{system_name}.") and key.endswith("samza.bootstrap")
            if bootstrap and value.strip().lower() in ("true", "yes", "1", "on"):
                raise KinesisConfigError(
                    f"config key '{key}': a Kinesis stream cannot be a bootstrap stream "
                    "(it has no end to bootstrap to, and its shards change while the job runs)"
                )
        stores = sorted(key for key in config if key.startswith("stores."))
        if stores:
            raise KinesisConfigError(
                f"config key '{stores[0]}': jobs with Kinesis inputs cannot have stateful stores (shards move "
                "between tasks at run time, and local state would not follow its keys); repartition into "
                "another system first and keep state in a second job"
            )


def kinesis_system_names(config: Config) -> list[str]:
    """Systems whose ``samza.factory`` is the Kinesis factory, by any of its names."""
    return [s for s in system_names(config) if config.get(f"systems.{s}.samza.factory") in KINESIS_FACTORY_NAMES]
