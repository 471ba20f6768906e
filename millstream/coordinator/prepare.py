"""The one step every config passes before a job runs on it: paths resolved, a high-level application
expanded into the task config its containers run with, every closed namespace validated.

``millstream.config`` only reads and types keys; checking them needs the serdes, the systems'
factories, the state backends and the application's planner, which all sit above it. The CLI,
``TestRunner`` and the Spark runner call ``prepare`` (it is idempotent), so a job fails here, before
it starts, with the key at fault.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

from millstream.adjunct.validation import validate_adjunct_config
from millstream.config.core import Config, load_config
from millstream.config.settings import Settings
from millstream.config.views import (
    CLOSED_NAMESPACES,
    StreamSamzaConfig,
    SystemSamzaConfig,
    accepted_keys,
    resolve_paths,
    system_names,
)
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.coordinator.guarantee import validate_processing_guarantee
from millstream.coordinator.services import DriverServices
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.operators.planner import expand_application
from millstream.serde.registry import SerdeRegistry
from millstream.startpoint.settings import StartpointConfig
from millstream.storage.backends.changelog.names import with_default_changelogs
from millstream.storage.managers.validation import validate_state_config
from millstream.table.settings import TableConfig, table_ids


def prepare(config: Config) -> Settings:
    """The settings a job runs with: absolute paths, the application expanded, default changelog names
    derived (``storage.backends.changelog.names``), every key checked — so every view the job reads later was
    parsed once here without an error, and is kept by the settings (``millstream.config.settings``)."""
    resolved = with_default_changelogs(expand_application(Settings.of(resolve_paths(config))))
    with DriverServices(resolved) as services:  # only its factories are used: looking one up opens nothing
        _validate(resolved, services)
    return resolved


def load_job_config(path: str | os.PathLike[str] | None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """``load_config`` then ``prepare``: a job's config file as a runner takes it."""
    return prepare(load_config(path, overrides))


def _validate(config: Settings, services: DriverServices) -> None:
    """Stop a job before it starts on any unknown key in a closed namespace or ill-typed value."""
    _ = config.job
    config.task.broadcast_ssps()
    config.view(MetadataConfig)
    config.view(MetricsConfig).snapshot_stream()
    config.view(StartpointConfig)
    _ = config.app
    task = config.task
    task.input_streams()
    if task.dead_letter() is None and task.process_errors == "dead-letter":
        raise ConfigError("config key 'task.process.errors' is 'dead-letter': set task.dead.letter.stream too")
    serdes = SerdeRegistry.from_config(config)
    validate_state_config(config, serdes)
    validate_adjunct_config(config)
    validate_processing_guarantee(config, services.factory)
    for table_id in table_ids(config):
        config.view(TableConfig, table_id)
    _refuse_misspelt_sections(config)
    for key in config:
        if key.startswith("systems.") and key.count(".") < 2:
            raise ConfigError(f"unknown config key '{key}' (expected systems.<system>.<setting>)")
    for system in system_names(config):
        samza = config.view(SystemSamzaConfig, system)
        factory = services.factory(system)
        for kind, serde_name in (("key", samza.key_serde), ("msg", samza.msg_serde)):
            if serde_name:
                serdes.get(serde_name, f"systems.{system}.samza.{kind}.serde")
        _validate_system_keys(config, system, factory, serdes)
        _refuse_intermediate_streams_without_fixed_partitions(config, system, factory)
    for key in config:
        if key.startswith("serializers.") and not (key.startswith("serializers.registry.") and key.count(".") >= 3):
            raise ConfigError(f"unknown config key '{key}' (expected serializers.registry.<name>.class)")


def _refuse_intermediate_streams_without_fixed_partitions(config: Settings, system: str, factory: Any) -> None:
    """An intermediate stream needs fixed partitions numbered from a fixed origin: ``partition_by`` routes each
    key to one partition for good, and a downstream stage that starts fresh knows the stream is complete only
    if its first record is still at the origin. Kinesis shards come and go and their sequence numbers have no
    origin, so the planner's streams cannot live there. The admin is created, never started (it opens no
    connection), only to read its class's traits: the driver's services start their admins later, from the
    prepared config."""
    suffix = ".samza.intermediate"
    prefix = f"systems.{system}.streams."
    streams = sorted(
        key[len(prefix) : -len(suffix)]
        for key in config
        if key.startswith(prefix)
        and key.endswith(suffix)
        and config.view(StreamSamzaConfig, SystemStream(system, key[len(prefix) : -len(suffix)])).intermediate
    )
    if not streams:
        return
    admin = factory.get_admin(system, config)
    if admin.partitions_are_fixed and admin.origin_offset is not None:
        return
    key = "app.intermediate.system" if config.app.intermediate_system == system else f"{prefix}{streams[0]}{suffix}"
    raise ConfigError(
        f"config key '{key}': system '{system}' cannot hold the intermediate stream '{system}.{streams[0]}': its "
        "partitions come and go at run time and its offsets have no fixed origin, so partition_by could not keep a "
        "key in one partition and a downstream stage could not tell a complete stream from one that lost records; "
        "put intermediate streams on a Kafka or log system (app.intermediate.system)"
    )


def _refuse_misspelt_sections(config: Config) -> None:
    """Namespaces outside millstream's are the user's own, so ``jobs.name`` would be silently ignored and
    the job fail later for a reason far from the typo: a section within a letter or two of one of
    millstream's is refused as an unknown key, naming the one it resembles."""
    sections = [namespace.rstrip(".") for namespace in CLOSED_NAMESPACES]
    for key in config:
        section, dot, rest = key.partition(".")
        if not dot or section in sections:
            continue
        if close := difflib.get_close_matches(section, sections, n=1, cutoff=0.8):
            raise ConfigError(f"unknown config key '{key}': no section '{section}.'; did you mean '{close[0]}.{rest}'?")


def _validate_system_keys(config: Settings, system: str, factory: Any, serdes: SerdeRegistry) -> None:
    prefix = f"systems.{system}."
    for rest in config.subset(prefix):
        key = prefix + rest
        if rest.startswith("samza."):
            continue  # parsed as a whole by the SystemSamzaConfig view
        if rest.startswith("streams."):
            stream, sep, _ = rest[len("streams.") :].rpartition(".samza.")
            if sep:
                stream_config = config.view(StreamSamzaConfig, SystemStream(system, stream))
                for kind, serde_name in (("key", stream_config.key_serde), ("msg", stream_config.msg_serde)):
                    if serde_name:
                        serdes.get(serde_name, f"systems.{system}.streams.{stream}.samza.{kind}.serde")
                continue
            raise ConfigError(
                f"unknown config key '{key}' (stream settings live under "
                f"'systems.{system}.streams.<stream>.samza.': {accepted_keys(StreamSamzaConfig)})"
            )
        if factory.config_keys is None or rest in factory.config_keys or rest.startswith(factory.open_prefixes):
            continue
        accepted = sorted(factory.config_keys) + [f"{p}*" for p in factory.open_prefixes]
        raise ConfigError(
            f"unknown config key '{key}' for system '{system}' ({type(factory).__name__} accepts: "
            f"samza.*, streams.<stream>.samza.*{', ' if accepted else ''}{', '.join(accepted)})"
        )
