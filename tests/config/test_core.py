"""The flat config map: YAML flattening, .properties parsing, --set overrides, relative paths,
typed getters and the redaction of ``sensitive.*`` values."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.config.core import (
    flatten,
    load_config,
    parse_override,
    parse_properties,
)
from millstream.config.secrets import REDACTED
from millstream.config.settings import Settings
from millstream.config.views import resolve_paths
from millstream.errors import ConfigError

SECRET = "hunter2-do-not-print"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- Config --------------------------------------------------------------------------------------------


def test_values_are_stored_as_text() -> None:
    config = Settings({"a.int": 5, "a.float": 1.5, "a.true": True, "a.false": False, "a.none": None})
    assert config.to_dict() == {"a.int": "5", "a.float": "1.5", "a.true": "true", "a.false": "false", "a.none": ""}


def test_list_values_are_joined_with_commas() -> None:
    assert Settings({"task.inputs": ["log.a", "log.b", 3]})["task.inputs"] == "log.a,log.b,3"


def test_mapping_value_is_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'task\.inputs' has a dict value"):
        Settings({"task.inputs": {"nested": 1}})


def test_config_is_a_read_only_mapping() -> None:
    config = Settings({"a": "1", "b": "2"})
    assert len(config) == 2
    assert sorted(config) == ["a", "b"]
    assert config.get("missing") is None
    with pytest.raises(TypeError):
        config["a"] = "3"  # type: ignore[index]


def test_subset_strips_the_prefix_unless_told_not_to() -> None:
    config = Settings({"systems.log.samza.factory": "log", "systems.kafka.x": "1", "task.inputs": "a"})
    assert config.subset("systems.log.") == {"samza.factory": "log"}
    assert config.subset("systems.", strip_prefix=False) == {"systems.log.samza.factory": "log", "systems.kafka.x": "1"}


def test_with_overrides_and_without_return_new_configs_keeping_the_source() -> None:
    config = Settings({"a": "1", "b": "2"}, source="/jobs/job.yaml")
    changed = config.with_overrides({"a": 9, "c": True}).without("b")
    assert changed.to_dict() == {"a": "9", "c": "true"}
    assert changed.source == "/jobs/job.yaml"
    assert config.to_dict() == {"a": "1", "b": "2"}


def test_get_list_splits_and_trims_and_drops_empty_items() -> None:
    assert Settings({"k": " a, b ,,c "}).get_list("k") == ["a", "b", "c"]
    assert Settings({}).get_list("k") == []


@pytest.mark.parametrize(
    ("raw", "expected"), [("true", True), ("YES", True), ("1", True), ("off", False), ("0", False)]
)
def test_get_bool_accepts_the_usual_spellings(raw: str, expected: bool) -> None:
    assert Settings({"k": raw}).get_bool("k", not expected) is expected


def test_get_bool_and_get_int_fall_back_to_the_default() -> None:
    assert Settings({}).get_bool("k", True) is True
    assert Settings({}).get_int("k", 7) == 7


def test_ill_typed_bool_and_int_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'task\.flag' must be true or false, got 'maybe'"):
        Settings({"task.flag": "maybe"}).get_bool("task.flag", False)
    with pytest.raises(ConfigError, match=r"'task\.commit\.ms' must be an integer, got 'abc'"):
        Settings({"task.commit.ms": "abc"}).get_int("task.commit.ms", 0)


# -- sensitive values ----------------------------------------------------------------------------------


def test_sensitive_values_are_masked_in_repr_and_redacted() -> None:
    config = Settings({"sensitive.kafka.password": SECRET, "job.name": "j"})
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert config.redacted() == {"sensitive.kafka.password": REDACTED, "job.name": "j"}
    assert config["sensitive.kafka.password"] == SECRET


def test_sensitive_values_never_appear_in_typed_getter_errors() -> None:
    config = Settings({"sensitive.port": SECRET})
    with pytest.raises(ConfigError) as as_int:
        config.get_int("sensitive.port", 0)
    with pytest.raises(ConfigError) as as_bool:
        config.get_bool("sensitive.port", False)
    for error in (as_int.value, as_bool.value):
        assert "sensitive.port" in str(error)
        assert SECRET not in str(error)


def test_sensitive_values_never_appear_in_yaml_errors(tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", f'job.name: j\nsensitive.password: "{SECRET}\nother: [\n')
    with pytest.raises(ConfigError, match="not valid YAML") as raised:
        load_config(file)
    assert SECRET not in str(raised.value)
    assert "line" in str(raised.value)


def test_sensitive_values_never_appear_in_properties_errors() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_properties(f"job.name=j\nsensitive.token {SECRET}\n", "job.properties")
    assert "job.properties:2" in str(raised.value)
    assert SECRET not in str(raised.value)


def test_sensitive_values_never_appear_in_override_errors() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_override(f"sensitive.token:{SECRET}")
    assert SECRET not in str(raised.value)


# -- YAML ----------------------------------------------------------------------------------------------


def test_flatten_joins_nested_keys_with_dots() -> None:
    tree = {"task": {"commit": {"ms": 5}, "inputs": ["a", "b"]}, "job.name": "j", "systems": {"log": {}}}
    assert flatten(tree) == {"task.commit.ms": 5, "task.inputs": ["a", "b"], "job.name": "j"}


def test_yaml_nesting_and_dotted_keys_mean_the_same_key(tmp_path: Path) -> None:
    file = write(
        tmp_path / "job.yaml",
        "job:\n  name: wordcount\n  container.count: 2\ntask:\n  commit:\n    ms: 5000\n"
        "  inputs:\n    - log.lines\n    - log.more\ntask.window.ms: 100\n",
    )
    config = load_config(file)
    assert config["job.name"] == "wordcount"
    assert config["job.container.count"] == "2"
    assert config["task.commit.ms"] == "5000"
    assert config["task.inputs"] == "log.lines,log.more"
    assert config["task.window.ms"] == "100"
    assert config.source == str(file.resolve())


def test_empty_yaml_file_is_an_empty_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "job.yaml", ""))
    assert config["job.data.dir"] == str((tmp_path / ".millstream").resolve())


def test_yaml_that_is_not_a_mapping_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(write(tmp_path / "job.yaml", "- a\n- b\n"))


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")


# -- .properties ---------------------------------------------------------------------------------------


def test_properties_accept_equals_and_colon_separators_and_trim_spaces() -> None:
    text = "job.name = wordcount\ntask.commit.ms:5000\nsystems.x.samza.factory=pkg.mod:Factory\n"
    assert parse_properties(text, "f") == {
        "job.name": "wordcount",
        "task.commit.ms": "5000",
        "systems.x.samza.factory": "pkg.mod:Factory",
    }


def test_properties_skip_comments_and_blank_lines() -> None:
    text = "# a comment\n! another\n\n   \njob.name=j\n  # indented comment\n"
    assert parse_properties(text, "f") == {"job.name": "j"}


def test_properties_join_continuation_lines() -> None:
    text = "task.inputs=log.a,\\\n    log.b,\\\n    log.c\njob.name=j\n"
    assert parse_properties(text, "f") == {"task.inputs": "log.a,log.b,log.c", "job.name": "j"}


def test_properties_keep_a_continued_entry_on_the_last_line() -> None:
    assert parse_properties("job.name=j\ntask.inputs=log.a,\\", "f") == {"job.name": "j", "task.inputs": "log.a,"}


def test_properties_value_may_be_empty() -> None:
    assert parse_properties("task.class=\n", "f") == {"task.class": ""}


def test_properties_line_without_separator_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"job\.properties:2: expected 'key=value', got 'garbage'"):
        parse_properties("job.name=j\ngarbage\n", "job.properties")


def test_properties_file_is_loaded_by_its_suffix(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "job.properties", "job.name=props\ntask.commit.ms=10\n"))
    assert config["job.name"] == "props"
    assert config["task.commit.ms"] == "10"


# -- --set overrides -----------------------------------------------------------------------------------


def test_parse_override_splits_at_the_first_equals_and_trims() -> None:
    assert parse_override(" task.commit.ms = 5 ") == ("task.commit.ms", "5")
    assert parse_override("systems.k.consumer.opts=a=b") == ("systems.k.consumer.opts", "a=b")
    assert parse_override("task.class=") == ("task.class", "")


@pytest.mark.parametrize("text", ["no-equals", "=value", "  =x"])
def test_parse_override_rejects_anything_but_key_equals_value(text: str) -> None:
    with pytest.raises(ConfigError, match="--set expects key=value"):
        parse_override(text)


def test_overrides_beat_the_file(tmp_path: Path) -> None:
    file = write(tmp_path / "job.yaml", "job:\n  name: from-file\ntask.commit.ms: 5\n")
    overrides = dict(parse_override(text) for text in ["job.name=from-cli", "task.window.ms=7"])
    config = load_config(file, overrides)
    assert config["job.name"] == "from-cli"
    assert config["task.commit.ms"] == "5"
    assert config["task.window.ms"] == "7"


def test_overrides_alone_make_a_config_without_a_file() -> None:
    config = load_config(None, {"job.name": "cli-only"})
    assert config["job.name"] == "cli-only"
    assert config.source is None


# -- relative paths ------------------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_config_file_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    file = write(jobs / "job.yaml", "job.data.dir: data\nmetadata.store.path: meta/m.db\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(file)
    assert config["job.data.dir"] == str(jobs / "data")
    assert config["metadata.store.path"] == str(jobs / "meta" / "m.db")


def test_default_data_dir_is_next_to_the_config_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "job.yaml", "job.name: j\n"))
    assert config["job.data.dir"] == str(tmp_path / ".millstream")


def test_absolute_paths_and_open_namespaces_are_left_alone(tmp_path: Path) -> None:
    config = resolve_paths(
        Settings(
            {"job.data.dir": "/abs/data", "spark.local.dir": "rel", "sensitive.key.path": "rel"},
            source=str(tmp_path / "job.yaml"),
        )
    )
    assert config["job.data.dir"] == "/abs/data"
    assert config["spark.local.dir"] == "rel"
    assert config["sensitive.key.path"] == "rel"


def test_paths_without_a_config_file_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = resolve_paths(Settings({"metadata.store.path": "m.db"}))
    assert config["metadata.store.path"] == str(tmp_path / "m.db")
    assert config["job.data.dir"] == str(tmp_path / ".millstream")


def test_home_relative_paths_are_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = resolve_paths(Settings({"job.data.dir": "~/data"}, source="/elsewhere/job.yaml"))
    assert config["job.data.dir"] == str(tmp_path / "data")
