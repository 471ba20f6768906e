"""The task store a high-level job keeps its operator state in, declared from the application.

A job whose stages hold a stateful operator (a spec that says ``stateful = True``: a window, a stateful
map, a stream-stream join) gets one store per task, ``stores.operator-state.*``, with no YAML: the planner
adds its config when it expands the application. One store per task rather than one per operator, because
the task's control state (watermarks, end-of-stream, the replay filter's offsets) must sit in the same
snapshot as every operator's entries (``operators.state.StoreControlState``), and a store per task costs
one RocksDB instance and one changelog partition whatever the number of operators; operators keep apart by
key prefix (their op id, stable across restarts).

The store takes the job's state backends like any store (``stores.backup.factories``); with none
configured, or with ``changelog`` among them, it gets a changelog on ``app.intermediate.system``, so its
state is as durable as the control state that lived in the metadata store before. Its object cache is off
(``object.cache.size=0``): ``operators.state.StoreBackedState`` already keeps each operator's recent entries
as objects and writes them back before every snapshot, so a second cache would only copy them. Any
``stores.operator-state.*`` key the user sets wins over these defaults (``factory=inmemory``, another
changelog, its own backup factories).
"""

from __future__ import annotations

from collections.abc import Iterable

from millstream.api.specs import OperatorSpec
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig

OPERATOR_STORE = "operator-state"
"""The name of the store that holds a high-level task's operator and control state."""


def is_stateful(spec: OperatorSpec) -> bool:
    """Whether ``spec`` keeps state per task (and so needs the operator store)."""
    return spec.stateful


def has_operator_store(config: Config) -> bool:
    """Whether the (expanded) job declares the operator store."""
    return any(key.startswith(f"stores.{OPERATOR_STORE}.") for key in config)


def operator_store_config(
    config: Settings, operators: Iterable[OperatorSpec], job_name: str, job_id: str, system: str
) -> dict[str, str]:
    """The keys that declare the operator store for a run with ``operators``; none when no operator is
    stateful, and none that the user already set."""
    if not any(is_stateful(spec) for spec in operators):
        return {}
    prefix = f"stores.{OPERATOR_STORE}."
    # the operators' StoreBackedState caches their deserialized entries itself and writes them at before_checkpoint
    updates = {f"{prefix}factory": "rocksdb", f"{prefix}object.cache.size": "0"}
    own = config.view(StoreConfig, OPERATOR_STORE)
    factories = own.backup_factories
    if factories is None:
        factories = config.stores.backup_factories
    if factories is None or "changelog" in factories:
        updates[f"{prefix}changelog"] = f"{system}.{job_name}-{job_id}-{OPERATOR_STORE}-changelog"
    return {key: value for key, value in updates.items() if key not in config}
