"""Default changelog names, as Kafka Streams derives ``<application.id>-<store>-changelog``.

A store whose backup factories name the changelog backend but whose ``stores.<s>.changelog`` is not set
gets ``<job.name>-<job.id>-<store>-changelog`` on the system of the job's inputs. Configs that run today
are unchanged: such a store used to be refused at start, and an explicit ``stores.<s>.changelog`` always
wins. The name contains the job key, so two jobs (a copied config with another ``job.name``) never share a
derived changelog; the owner record (``SystemAdmin.claim_stream``) refuses an explicit name they share.

No default is derived when the inputs span several systems (or there are none): which system should hold
the changelog is then a choice the config must make, and the start is refused naming the key as before.
"""

from __future__ import annotations

import re

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, task_store_names
from millstream.storage.backends.registry import CHANGELOG, backup_factory_names, state_backend_factory_class

_REFUSED_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")


def default_changelog_name(config: Settings, store: str) -> str:
    """``<job.name>-<job.id>-<store>-changelog``, characters a Kafka topic or a log stream cannot hold
    replaced by ``_``, cut to 200 characters (the embedded log's limit; Kafka's is 249)."""
    name = _REFUSED_CHARACTERS.sub("_", f"{config.job.job_key}-{store}-changelog")
    return name[:200]


def with_default_changelogs(settings: Settings) -> Settings:
    """``settings`` with ``stores.<s>.changelog`` set for every changelog-backed store that names none."""
    changelog_class = state_backend_factory_class(CHANGELOG, "stores.<s>.backup.factories")
    unnamed = []
    for store in task_store_names(settings):
        if settings.view(StoreConfig, store).changelog:
            continue
        classes = [state_backend_factory_class(name, key) for name, key in backup_factory_names(settings, store)]
        if any(issubclass(factory_class, changelog_class) for factory_class in classes):
            unnamed.append(store)
    if not unnamed:
        return settings
    systems = sorted({stream.system for stream in settings.task.input_streams()})
    if len(systems) != 1:
        return settings  # refused at start: the changelog backend's check names stores.<s>.changelog
    return settings.with_overrides(
        {f"stores.{store}.changelog": f"{systems[0]}.{default_changelog_name(settings, store)}" for store in unnamed}
    )
