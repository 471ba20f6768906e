"""Refuse, before a job starts, what cannot be exactly-once (``task.processing.guarantee=exactly-once``).

Exactly-once holds only when everything a commit covers is written in one transaction: the checkpoints
(so they must be kept by the system the job writes to: a checkpoint topic on its Kafka system,
``task.checkpoint.factory=kafka``, or the coordinator file of its embedded log, ``task.checkpoint.factory=log``),
every changelog, every intermediate stream and the dead letters. A blob-store backup uploads beside
processing, after the commit that snapshotted it, so it cannot join the transaction: such stores are refused
(the changelog backend can). Output to another system is refused at its first write
(``ProducerPool.state_producer``), since a task may send anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

from millstream.checkpoint.factory import checkpoint_factory
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, StreamSamzaConfig, parse_stream, store_names
from millstream.contracts.systems import SystemFactory
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.storage.backends.registry import backup_factories

GUARANTEE = "task.processing.guarantee=exactly-once"


def validate_processing_guarantee(config: Settings, factories: Callable[[str], SystemFactory]) -> None:
    """Raise a ``ConfigError`` naming the key to change when the job cannot be exactly-once; ``factories``
    finds a system's factory (``DriverServices.factory``)."""
    task = config.task
    if not task.exactly_once:
        return
    system = checkpoint_factory(config).transaction_system(config)
    if system is None:
        raise ConfigError(
            f"{GUARANTEE} writes the checkpoints in the output's transaction: set task.checkpoint.factory=kafka "
            "(a checkpoint topic on the Kafka system the job writes to) or task.checkpoint.factory=log (the "
            f"embedded log's coordinator); checkpoints in '{task.checkpoint_factory}' cannot be committed "
            "atomically with the output"
        )
    if not factories(system).transactional(system, config):
        raise ConfigError(
            f"{GUARANTEE}: system '{system}' must write in transactions: remove "
            f"systems.{system}.transactional.writes=false"
        )
    for store in store_names(config):
        _check_store(config, store, system)
    for stream in _intermediate_streams(config):
        _check_written(stream, system, f"the intermediate stream '{stream.stream}' (app.intermediate.system)")
    dead_letters = task.dead_letter()
    if dead_letters is not None:
        _check_written(dead_letters, system, "task.dead.letter.stream")


def _check_store(config: Settings, store: str, system: str) -> None:
    own = config.view(StoreConfig, store)
    if own.adstore_input:
        return  # filled from its input, never written by the job: nothing to commit
    for factory_class in backup_factories(config, store):
        if not factory_class.commits_in_transaction:
            raise ConfigError(
                f"{GUARANTEE}: store '{store}' backs up to '{factory_class.marker_key()}', whose uploads cannot "
                f"join the transaction; set stores.{store}.backup.factories=changelog"
            )
    if own.changelog:
        _check_written(parse_stream(own.changelog, f"stores.{store}.changelog"), system, f"stores.{store}.changelog")


def _intermediate_streams(config: Settings) -> list[SystemStream]:
    """The streams the planner marked ``systems.<s>.streams.<stream>.samza.intermediate``."""
    streams = []
    for key in config:
        system, _, rest = key.removeprefix("systems.").partition(".streams.")
        if key.startswith("systems.") and rest.endswith(".samza.intermediate"):
            stream = SystemStream(system, rest.removesuffix(".samza.intermediate"))
            if config.view(StreamSamzaConfig, stream).intermediate:
                streams.append(stream)
    return streams


def _check_written(stream: SystemStream, system: str, what: str) -> None:
    if stream.system != system:
        raise ConfigError(
            f"{GUARANTEE}: {what} is on system '{stream.system}', but the job's transaction is on '{system}' "
            "(the checkpoints' system): every stream the job writes must be on it"
        )
