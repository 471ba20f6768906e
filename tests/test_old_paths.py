"""The module paths moved when each top-level folder became one layer keep working for one release: the same
module under the old name, with a ``DeprecationWarning``, in code and in config (``millstream.plugins``)."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.contracts.blobstore import blob_store
from millstream.contracts.metrics import MetricsRegistry
from millstream.embedded.local_blobstore import LocalBlobStore
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.old_paths import MOVED, new_name
from tests.helpers import job_config

ROOT = Path(__file__).resolve().parent.parent


def _without(old: str) -> None:
    """Forget an old name imported before, so that importing it warns again."""
    for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
        del sys.modules[name]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_with_a_deprecation_warning(old: str) -> None:
    _without(old)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__ is not None and module.__spec__.name == MOVED[old]


def test_a_module_of_a_moved_package_follows_it() -> None:
    assert new_name("millstream.systems.kafka.factory") == "millstream.connectors.kafka.factory"
    assert new_name("millstream.systems.producers") is None  # did not move
    _without("millstream.systems.kafka")
    with pytest.warns(DeprecationWarning, match="moved to millstream.connectors.kafka") as caught:
        old = importlib.import_module("millstream.systems.kafka.factory")
    assert old.KafkaSystemFactory is KafkaSystemFactory
    assert {str(w.message).split()[0] for w in caught} == {
        "millstream.systems.kafka",
        "millstream.systems.kafka.factory",
    }


def test_old_public_imports_keep_working() -> None:
    _without("millstream.metrics.registry")
    _without("millstream.metadata")
    with pytest.warns(DeprecationWarning, match="moved to millstream.contracts"):
        from millstream.metadata import coordination
        from millstream.metrics.registry import MetricsRegistry as Old
    assert Old is MetricsRegistry
    assert coordination.__name__ == "millstream.contracts.coordination"
    assert pickle.loads(pickle.dumps(Old)) is MetricsRegistry  # pickled by its new path


def test_old_class_names_in_config_load_through_the_plugins(tmp_path: Path) -> None:
    config = job_config(
        tmp_path,
        systems__log__samza__factory="millstream.systems.log.factory:LogSystemFactory",
        metadata__store__factory="millstream.metadata.sqlite:SqliteMetadataStoreFactory",
        blob__store__manager__factory="millstream.blobstore.local:LocalBlobStoreFactory",
    )
    for old in ("millstream.systems.log", "millstream.metadata", "millstream.blobstore"):
        _without(old)
    with pytest.warns(DeprecationWarning):
        assert isinstance(system_factory(config, "log"), LogSystemFactory)
    with pytest.warns(DeprecationWarning):
        assert isinstance(metadata_store(config), SqliteMetadataStore)
    with pytest.warns(DeprecationWarning):
        assert isinstance(blob_store(config), LocalBlobStore)


def test_the_warning_names_the_line_that_imports_the_old_path(tmp_path: Path) -> None:
    script = tmp_path / "user.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\nimport millstream.metrics.registry\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    assert f"{script}:3: DeprecationWarning: millstream.metrics.registry moved to millstream.contracts.metrics" in (
        done.stderr
    )
