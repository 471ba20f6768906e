"""Find a system's factory from ``systems.<s>.samza.factory``; ``log`` needs no configuration.

Only composition roots import this module (a container's services, the driver's): everything else is handed
the factories, admins, consumers and producers they build."""

from __future__ import annotations

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.config.views import DEFAULT_SYSTEM, SystemSamzaConfig
from millstream.contracts.systems import SystemContext, SystemFactory
from millstream.errors import ConfigError
from millstream.plugins import load_object

SYSTEM_FACTORIES = {
    "log": "millstream.embedded.log.factory:LogSystemFactory",
    "kafka": "millstream.connectors.kafka.factory:KafkaSystemFactory",
    "org.apache.samza.system.kafka.KafkaSystemFactory": "millstream.connectors.kafka.factory:KafkaSystemFactory",
    "kinesis": "millstream.connectors.kinesis.factory:KinesisSystemFactory",
    "org.apache.samza.system.kinesis.KinesisSystemFactory": (
        "millstream.connectors.kinesis.factory:KinesisSystemFactory"
    ),
}


def system_factory(config: Settings, system: str, context: SystemContext | None = None) -> SystemFactory:
    """A new factory of ``system``, bound to ``context``: by default one that opens a new metadata-store
    connection per request (what a driver-side caller wants; a container hands its services' context)."""
    name = config.view(SystemSamzaConfig, system).factory
    key = f"systems.{system}.samza.factory"
    if name is None:
        if system != DEFAULT_SYSTEM:
            raise ConfigError(f"system '{system}' has no factory: set '{key}' (e.g. log, kafka, kinesis)")
        name = "log"
    factory_class = load_object(name, key, SYSTEM_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, SystemFactory)):
        raise ConfigError(f"config key '{key}': '{name}' is not a SystemFactory")
    return factory_class().bind(context or SystemContext(lambda: metadata_store(config)))
