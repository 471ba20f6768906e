"""Getting started's "Your first job in 10 minutes", as written on the page: its files, its TestRunner
test, and its shell steps (``millstream run`` through the Spark runner on the shared session) give the
output the page promises."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from millstream.cli.main import app
from millstream.coordinator.prepare import load_job_config
from millstream.spark.run.runner import SparkJobRunner

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def section_blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Your first job in 10 minutes") :]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_the_first_job_on_the_getting_started_page_works_as_written(spark_local, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for _, body in section_blocks():
        if match := re.match(r"# myjob/(\S+)\n", body):
            (tmp_path / match.group(1)).write_text(body, encoding="utf-8")
    namespace: dict[str, object] = {}
    exec((tmp_path / "test_filter.py").read_text(encoding="utf-8"), namespace)
    namespace["test_only_views_of_logged_in_users_are_kept_keyed_by_user"]()  # type: ignore[operator]

    steps = [
        line.split("#")[0].strip() for lang, body in section_blocks() if lang == "sh" for line in body.splitlines()
    ]
    consumed = ""
    for step in [s for s in steps if s and not s.startswith(("cd ", "python -m pytest"))]:
        if step.startswith("printf"):
            subprocess.run(["bash", "-c", step], check=True)
        elif step == "millstream run job.yaml":
            result = SparkJobRunner(load_job_config(tmp_path / "job.yaml"), spark=spark_local).run()
            assert result.outcome == "finished", result.error
        else:
            outcome = CliRunner().invoke(app, shlex.split(step)[1:])
            assert outcome.exit_code == 0, f"{step}: {outcome.output}"
            consumed = outcome.output if " consume " in step else consumed
    records = [orjson.loads(line) for line in consumed.splitlines()]
    assert sorted((r["key"], r["value"]["page"]) for r in records) == [("ada", "/home"), ("bob", "/help")]
