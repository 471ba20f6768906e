"""A missing optional dependency is one line naming the extra that installs it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from millstream.errors import ConfigError
from millstream.extras import EXTRA_OF_MODULE, install_hint, missing_module_hint
from millstream.plugins import load_object
from millstream.serde.registry import SERDE_CLASS_ALIASES

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_every_extra_named_for_a_module_is_declared_in_the_project() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    named = {extra for extras in EXTRA_OF_MODULE.values() for extra in extras}
    assert named <= set(declared), sorted(named - set(declared))


def test_a_missing_optional_module_gets_the_pip_command_of_its_extras() -> None:
    hint = install_hint(ModuleNotFoundError("No module named 'boto3'", name="boto3"))
    assert hint == "'boto3' is not installed: pip install 'millstream[kinesis]' or pip install 'millstream[s3]'"


def test_a_missing_submodule_of_an_optional_dependency_names_its_extra() -> None:
    hint = install_hint(ModuleNotFoundError("No module named 'google.protobuf'", name="google.protobuf"))
    assert hint is not None and "millstream[protobuf]" in hint


def test_a_users_missing_module_gets_no_install_hint() -> None:
    assert install_hint(ModuleNotFoundError("No module named 'mycompany'", name="mycompany")) is None


def test_a_broken_optional_module_that_is_installed_gets_no_install_hint() -> None:
    assert install_hint(ImportError("cannot import name 'x' from 'fastavro'", name="fastavro")) is None


def test_a_module_that_imports_is_not_reported_missing() -> None:
    assert missing_module_hint("orjson", "anything") is None


def test_a_module_that_does_not_import_is_reported_with_its_purpose_and_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    hint = missing_module_hint("pyarrow", "format 'millstream'")
    assert hint == "format 'millstream' needs pyarrow, which is not installed: pip install 'millstream[dataframes]'"


def test_a_serde_whose_library_is_missing_names_the_key_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastavro", None)
    monkeypatch.delitem(sys.modules, "millstream.serde.avro", raising=False)
    with pytest.raises(ConfigError) as raised:
        load_object("avro", "serializers.registry.events.class", SERDE_CLASS_ALIASES)
    assert str(raised.value) == (
        "config key 'serializers.registry.events.class': 'avro' needs an optional dependency: "
        "'fastavro' is not installed: pip install 'millstream[avro]'"
    )
