"""Refuse, before anything starts, a job whose shared state would live on each host's own disk.

The embedded defaults keep what every container and the driver must share in files under ``job.data.dir``: the
``log`` system's streams, the SQLite metadata store (job model, epochs, checkpoints) and the ``local`` blob store.
In local mode every container is a thread of one host, so that works. On a cluster each host would silently
create its own empty copy: containers fenced as belonging to an unknown generation, state missing from blobs
another host wrote, bulk-built versions scattered over executors' disks. So on any master other than ``local``,
``local[N]`` or ``local[N,F]`` those settings are refused (exit 2), naming each key, its value and the fix, unless
the user declares the paths shared (``job.shared.filesystem: true``, an NFS mount on every host).

The check needs only the master's name, not a running Spark: ``millstream run --master``, the spark-submit entry
point and ``millstream adstore build`` all call it with the master they are about to use.
"""

from __future__ import annotations

from dataclasses import dataclass

from millstream.composition.systems import SYSTEM_FACTORIES
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import (
    DEFAULT_SYSTEM,
    StoreConfig,
    SystemSamzaConfig,
    adjunct_store_names,
    parse_stream,
    store_names,
    system_names,
)
from millstream.contracts.blobstore import BLOB_STORE_FACTORIES
from millstream.contracts.blobstore import FACTORY_KEY as BLOB_FACTORY_KEY
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.contracts.metadata_factory import FACTORY_KEY as METADATA_FACTORY_KEY
from millstream.contracts.metadata_factory import METADATA_STORE_FACTORIES
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.errors import ConfigError
from millstream.spark.run.session import local_slots
from millstream.storage.backends.registry import BLOBSTORE, backup_factory_names, restore_factory_names

SHARED_KEY = "job.shared.filesystem"


@dataclass(frozen=True)
class HostLocalSetting:
    """A config key whose value keeps shared state on one host's disk, and what to set instead."""

    key: str
    value: str
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}: {self.why}; {self.fix}"


class HostLocalStateError(ConfigError):
    """A job or build on a multi-host master would keep shared state on each host's own disk."""

    def __init__(self, master: str, settings: list[HostLocalSetting]) -> None:
        self.master = master
        self.settings = settings
        listed = "; ".join(f"({number}) {setting}" for number, setting in enumerate(settings, 1))
        super().__init__(
            f"Spark master '{master}' runs containers on several hosts, but {listed}. If these paths are one "
            f"filesystem that every host mounts (NFS or similar), set {SHARED_KEY}=true"
        )


def is_single_host(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]`` and ``local[N,F]``: every container in the driver's JVM, on its host."""
    return local_slots(master.strip()) is not None


def refuse_host_local_state(config: Config, master: str) -> None:
    """Refuse running ``config``'s job on ``master`` when its log, metadata or blobs would live on each host
    (``config``: the job's ``Settings``, or a loaded ``Config``, read as settings: users call it at an old path)."""
    config = Settings.of(config)
    _refuse(config, master, job_settings(config))


def refuse_host_local_blobs(config: Config, master: str) -> None:
    """Refuse a bulk build on ``master`` whose files its executors would write to their own disks (``config``: the
    job's ``Settings``, or a loaded ``Config``, read as settings: users call it at an old path)."""
    config = Settings.of(config)
    _refuse(config, master, [setting for setting in [local_blob_store(config, "the bulk build")] if setting])


def _refuse(config: Settings, master: str, settings: list[HostLocalSetting]) -> None:
    if settings and not is_single_host(master) and not config.job.shared_filesystem:
        raise HostLocalStateError(master, settings)


def job_settings(config: Settings) -> list[HostLocalSetting]:
    """Every setting of ``config`` that keeps the job's shared state in host-local files."""
    settings = log_system_settings(config)
    metadata = sqlite_metadata_store(config)
    if metadata is not None:
        settings.append(metadata)
    users = blob_store_users(config)
    blobs = local_blob_store(config, users) if users else None
    if blobs is not None:
        settings.append(blobs)
    return settings


def log_system_settings(config: Settings) -> list[HostLocalSetting]:
    """The keys naming streams of an embedded ``log`` system: inputs, changelogs, dead letters, the metrics
    stream, adjunct inputs, the intermediate streams of an application, and a system configured as ``log``."""
    logs = {system for system in system_names(config) if _is_log_system(config, system)}
    fix = (
        "move these streams to Kafka (systems.<name>.samza.factory=kafka and the stream names <name>.<stream>; "
        "a bare stream name means the log system)"
    )
    settings = []
    for key, value in _stream_keys(config):
        streams = [parse_stream(name, key) for name in value.split(",") if name.strip()]
        on_log = sorted({str(stream) for stream in streams if stream.system in logs})
        if on_log:
            why = f"the embedded log system keeps stream(s) {', '.join(on_log)} in files on each host"
            settings.append(HostLocalSetting(key, value, why, fix))
    for system in sorted(logs - {DEFAULT_SYSTEM}):
        key = f"systems.{system}.samza.factory"
        why = f"system '{system}' is the embedded log, which keeps its streams in files on each host"
        settings.append(HostLocalSetting(key, str(config.get(key)), why, "use kafka"))
    return settings


def _is_log_system(config: Settings, system: str) -> bool:
    factory = config.view(SystemSamzaConfig, system).factory
    if factory is None:
        return system == DEFAULT_SYSTEM
    return factory == "log" or factory == SYSTEM_FACTORIES["log"]


def _stream_keys(config: Settings) -> list[tuple[str, str]]:
    """``(key, value)`` of every key that names streams a job reads or writes."""
    task = config.task
    keys: list[tuple[str, str]] = []
    if task.inputs:
        keys.append(("task.inputs", ",".join(task.inputs)))
    if task.broadcast_inputs:
        keys.append(("task.broadcast.inputs", ",".join(e.partition("#")[0] for e in task.broadcast_inputs)))
    for key in ("task.dead.letter.stream", "metrics.reporter.snapshot.stream"):
        if config.get(key):
            keys.append((key, str(config.get(key))))
    for store in store_names(config):
        own = config.view(StoreConfig, store)
        if own.changelog:
            keys.append((f"stores.{store}.changelog", own.changelog))
        if own.adstore_input:
            keys.append((f"stores.{store}.adstore.input", own.adstore_input))
    intermediate = _intermediate_system(config)
    if intermediate is not None:
        keys.append(("app.intermediate.system", f"{intermediate}.<intermediate streams>"))
    return keys


def _intermediate_system(config: Config) -> str | None:
    """The system of an expanded application's intermediate streams, if it has any."""
    marked = [key for key in config if key.startswith("systems.") and key.endswith(".samza.intermediate")]
    systems = {key.split(".", 2)[1] for key in marked if str(config.get(key)).lower() == "true"}
    return sorted(systems)[0] if systems else None


def sqlite_metadata_store(config: Settings) -> HostLocalSetting | None:
    name = config.view(MetadataConfig).store_factory
    if name not in ("sqlite", METADATA_STORE_FACTORIES["sqlite"]):
        return None
    shown = name if METADATA_FACTORY_KEY in config else f"{name} (the default)"
    why = (
        "the SQLite metadata store (job model, epochs, checkpoints, stop signals) is a file each host would "
        "create for itself"
    )
    fix = "use metadata.store.factory=kafka (the coordinator stream on the job's Kafka system)"
    return HostLocalSetting(METADATA_FACTORY_KEY, shown, why, fix)


def blob_store_users(config: Settings) -> str:
    """What of the job reads or writes the blob store: stores backed up to it, versioned adjunct stores."""
    users = []
    for store in store_names(config):
        named = {name for name, _ in backup_factory_names(config, store) + restore_factory_names(config, store)}
        if BLOBSTORE in named or any(name.endswith("BlobStoreStateBackendFactory") for name in named):
            users.append(f"store '{store}'")
    for store in adjunct_store_names(config):
        if config.view(StoreConfig, store).adstore_versioned:
            users.append(f"versioned adjunct store '{store}'")
    return ", ".join(sorted(set(users)))


def local_blob_store(config: Settings, users: str) -> HostLocalSetting | None:
    name = config.view(BlobStoreConfig).manager_factory
    if name not in ("local", BLOB_STORE_FACTORIES["local"]):
        return None
    shown = name if BLOB_FACTORY_KEY in config else f"{name} (the default)"
    why = f"the local blob store writes the snapshots and files of {users} to a directory on each host"
    fix = "use blob.store.manager.factory=s3 or azure (or back stores up to Kafka changelogs instead)"
    return HostLocalSetting(BLOB_FACTORY_KEY, shown, why, fix)
